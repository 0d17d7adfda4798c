"""airflow-provider-melon: distributed deep-learning training on Hadoop YARN with MeLoN GPU sharing.

Kept import-light on purpose: ``python -m airflow_provider_melon.runtime.executor`` runs inside YARN
containers under the job's own interpreter, where Airflow is not installed.

Modules that moved out of the package root (issue 25) still import under their old dotted path, with a
:class:`DeprecationWarning`: the old name is the new module itself (``sys.modules`` alias, by a meta-path
finder), so a ``mock.patch`` or ``isinstance`` through either name means the same thing.
"""

import importlib
import importlib.machinery
import sys
import warnings

__version__ = "0.1.0"

#: old module (under this package) → where it lives now
MOVED = {
    "cli_jobs": "cli.jobs",
    "doctor": "cli.doctor",
    "packing": "cli.pack_env",
    "minicluster": "dev.minicluster",
    "local_airflow": "dev.local_airflow",
    "hadoop_compat": "hadoop.compat",
    "logs": "hadoop.log_follower",
    "nm_logs": "hadoop.nodemanager",
    "rm_json": "hadoop.rm_json",
    "queues": "hadoop.queues",
    "delegation": "hadoop.delegation",
    "staging_gc": "hadoop.staging_gc",
    "kerberos": "hooks.kerberos",
}


def get_provider_info():
    from airflow_provider_melon.provider_info import get_provider_info as _info

    return _info()


def _moved_target(fullname: str):
    prefix, _, leaf = fullname.rpartition(".")
    if prefix != __name__ or leaf not in MOVED:
        return None
    return f"{__name__}.{MOVED[leaf]}"


class _MovedModuleFinder:
    """``airflow_provider_melon.<old>`` → the module at its new path, with a DeprecationWarning.

    A meta path finder and loader by protocol, not by ``importlib.abc``'s base classes: importing those pulls in
    ``importlib.resources`` and ``pathlib``, which every executor would pay for at its start."""

    def find_spec(self, fullname, path=None, target=None):
        new = _moved_target(fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        new = _moved_target(spec.name)
        warnings.warn(f"{spec.name} moved to {new}; import it from there (the old path goes in a later release)",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        self._own_spec = module.__spec__  # the import system sets the old name's spec on it next
        return module

    def exec_module(self, module):
        module.__spec__ = self._own_spec  # it is already executed; keep its own spec (reload, pickle, -m)


if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedModuleFinder())  # before the path finders: an old file elsewhere must not win


def __getattr__(name):
    if name in MOVED:  # ``from airflow_provider_melon import minicluster``
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
