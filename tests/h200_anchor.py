"""The measured H200 anchor the policy tests check placement rules against (tests/unit/test_policy.py and
test_candidates.py): the data directory, the co-location curves repeated from h200-colocate.json (so a decision is
tested apart from the data file) and a speed model built by hand from them and h200-mix.json's mixes."""

import json
import os

from airflow_provider_melon.gpu import policy

DATA = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "data")
DATA = os.environ.get("MELON_SHARED_DATA", os.path.abspath(DATA))

R18_CURVE = {2: 1.82, 4: 3.52, 8: 3.71}
R50_CURVE = {2: 1.19, 4: 1.19, 8: 1.19}
R18_MB, R50_MB, H200_MB = 1654, 4906, 141 * 1024


def load(name):
    with open(os.path.join(DATA, name)) as f:
        return json.load(f)


def rates(n_large, n_small):
    """Each large / each small task's fraction of solo speed (the anchor above and h200-mix.json's mixes)."""
    if n_large and not n_small:
        return policy.colocation_speedup(R50_CURVE, n_large) / n_large, 0.0
    if n_small and not n_large:
        return 0.0, policy.colocation_speedup(R18_CURVE, n_small) / n_small
    if not n_large:
        return 0.0, 0.0
    return {1: (0.93, 0.96), 2: (0.65, 0.98)}.get(n_small, (0.38, 1.0))
