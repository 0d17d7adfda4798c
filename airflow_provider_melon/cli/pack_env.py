"""Pack a Python environment into a relocatable tar.gz that YARN localizes as an ARCHIVE.

Real clusters do not have a job's packages on every node: `melon pack-env env.tar.gz` packs the current
virtualenv with venv-pack (or a conda env with conda-pack); upload it to HDFS and name it in the job:
``environment: {archive: hdfs:///user/me/envs/env.tar.gz, python: env/bin/python}`` — the archive is
unpacked into the container under the first component of ``python`` (``env``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def pack_env(output: str, *, venv: str | None = None, conda: str | None = None) -> str:
    output = str(Path(output).resolve())
    if conda:
        try:
            import conda_pack
        except ImportError as exc:
            raise SystemExit("conda-pack is not installed: pip install conda-pack") from exc
        kwargs = {"prefix": conda} if os.sep in conda else {"name": conda}
        conda_pack.pack(output=output, force=True, **kwargs)
        return output
    try:
        import venv_pack
    except ImportError as exc:
        raise SystemExit("venv-pack is not installed: pip install 'airflow-provider-melon[pack]'") from exc
    prefix = venv or sys.prefix
    venv_pack.pack(prefix=prefix, output=output, force=True)
    return output
