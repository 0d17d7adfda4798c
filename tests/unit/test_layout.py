"""The package's layout rules (docs/architecture.md), checked by reading its source with ``ast``.

* the package root holds at most 8 modules (a module is as long as its one responsibility needs: `make test`
  runs ruff's lint instead of a line-count gate);
* layers point down: a module imports only from its own layer or the ones below (any import, also one inside
  a function: an import that runs later still points somewhere);
* ``runtime/`` and ``gpu/`` (the container payload) import nothing from Airflow or from ``hadoop/``; ``hadoop/``
  imports nothing from Airflow;
* no import cycle between modules, counting every import (one inside a function or under ``if TYPE_CHECKING:``
  too: a lazy import must not close a circle);
* no module uses another module's private (``_``) names;
* no shims: no module-level ``__getattr__`` (forwarding names to another module), and nothing in the package
  puts a finder on ``sys.meta_path`` (aliasing module paths); a name is imported from its one home.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_provider_melon

PKG = Path(airflow_provider_melon.__file__).resolve().parent
NAME = "airflow_provider_melon"

#: layer of each top-level part of the package (a module imports from its layer or lower ones only)
LAYERS = {
    "runtime": 0,
    "gpu": 0,
    "am": 0,
    "rm": 0,
    "hadoop": 1,
    "spec": 2,
    "submission": 2,
    "planner": 2,
    "provider_info": 2,
    "version_compat": 3,
    "hooks": 3,
    "links": 4,
    "operators": 4,
    "sensors": 4,
    "triggers": 4,
    "plugin": 4,
    "cli": 5,
    "dev": 5,
}
AIRFLOW_FREE = ("runtime", "gpu", "hadoop")
NOT_FROM_HADOOP = ("runtime", "gpu")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([NAME, *parts])] = path
    return out


MODULES = _modules()


def _part(module: str) -> str:
    """The top-level part of the package a module belongs to ('' for the package's own __init__)."""
    rest = module[len(NAME) + 1 :] if module != NAME else ""
    return rest.split(".", 1)[0]


def _type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:``: its imports never run (still an arrow for the layers, not for import cycles)."""
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, module: str) -> list[tuple[str, bool]]:
    """(imported name, at module level) for every import in a file; relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = (
                top
                and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                and not _type_checking(child)
            )
            if isinstance(child, ast.Import):
                found.extend((alias.name, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    found.append((sub if sub in MODULES else base, top))
            visit(child, inner)

    visit(tree, True)
    return found


GRAPH = {m: _imports(p, m) for m, p in MODULES.items()}


def test_the_package_root_holds_at_most_8_modules():
    root = sorted(p.name for p in PKG.glob("*.py"))
    assert len(root) <= 8, root


def test_every_part_has_a_layer_and_every_layer_names_a_part():
    """A part without a layer would escape :func:`test_layers_point_down`; a layer without a part is a stale rule."""
    parts = {_part(m) for m in MODULES} - {""}
    assert parts == set(LAYERS), {"no layer": sorted(parts - set(LAYERS)), "no such part": sorted(set(LAYERS) - parts)}


def test_layers_point_down():
    upward = []
    for module, imports in GRAPH.items():
        here = LAYERS.get(_part(module))
        if here is None:
            continue  # the package __init__: import-light, aliases only
        for name, _top in imports:
            if name.startswith(NAME + ".") and (there := LAYERS.get(_part(name))) is not None and there > here:
                upward.append(f"{module} -> {name}")
    assert not upward, "imports pointing up a layer:\n" + "\n".join(upward)


@pytest.mark.parametrize("part", AIRFLOW_FREE)
def test_airflow_free_parts_import_no_airflow(part):
    bad = [
        f"{m} -> {n}"
        for m, imports in GRAPH.items()
        if _part(m) == part
        for n, _top in imports
        if n == "airflow" or n.startswith("airflow.")
    ]
    assert not bad, bad


@pytest.mark.parametrize("part", NOT_FROM_HADOOP)
def test_the_container_payload_imports_nothing_from_hadoop(part):
    bad = [
        f"{m} -> {n}"
        for m, imports in GRAPH.items()
        if _part(m) == part
        for n, _top in imports
        if _part(n) == "hadoop" and n.startswith(NAME)
    ]
    assert not bad, bad


def test_no_import_cycle():
    edges = {m: sorted({n for n, _top in imports if n in MODULES and n != m}) for m, imports in GRAPH.items()}
    cycles, state = [], {}

    def walk(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in edges[node]:
            if nxt.startswith(node + "."):
                continue  # a package importing its own submodule is not a cycle
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(path[path.index(nxt) :] + [nxt]))
            elif nxt not in state:
                walk(nxt, path + [nxt])
        state[node] = "done"

    for module in edges:
        if module not in state:
            walk(module, [module])
    assert not cycles, "import cycles (lazy and TYPE_CHECKING imports included):\n" + "\n".join(cycles)


def _module_level(tree: ast.Module) -> list[ast.AST]:
    """Every node that runs when the module is imported: its statements, also inside a module-level ``if``/``try``/
    ``with``, but not the bodies of its functions and classes."""
    found: list[ast.AST] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                found.append(child)  # its name is bound at import time; its body runs later
                continue
            found.append(child)
            visit(child)

    visit(tree)
    return found


def _private_uses(path: Path) -> list[str]:
    """Another package module's private names this file uses: ``from …melon.x import _name`` and ``x._name`` on a
    name bound to a package module (``import …melon.x as x`` or ``from …melon import x``)."""
    tree = ast.parse(path.read_text(), str(path))
    bound: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(NAME):
            for alias in node.names:
                if f"{node.module}.{alias.name}" in MODULES:
                    bound.add(alias.asname or alias.name)
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            bound.update(alias.asname for alias in node.names if alias.asname and alias.name.startswith(NAME))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names():
    """A name another module needs is public in its home; a leading underscore means "only here"."""
    bad = {str(path.relative_to(PKG)): uses for path in MODULES.values() if (uses := _private_uses(path))}
    assert not bad, bad


def test_no_module_getattr_and_no_meta_path_finder():
    shims = []
    for module, path in MODULES.items():
        for node in _module_level(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__":
                shims.append(f"{module}:{node.lineno}: module-level __getattr__ (names forwarded from elsewhere)")
            elif isinstance(node, ast.Attribute) and node.attr == "meta_path":
                shims.append(f"{module}:{node.lineno}: sys.meta_path changed at import (module paths aliased)")
    assert not shims, "shims:\n" + "\n".join(shims)


def test_importing_the_package_leaves_the_import_system_alone():
    code = (
        "import sys\nbefore = list(sys.meta_path)\nimport airflow_provider_melon\n"
        "assert sys.meta_path == before, [type(f).__name__ for f in sys.meta_path if f not in before]\n"
        "assert not hasattr(airflow_provider_melon, '__getattr__')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PKG.parent)
    assert done.returncode == 0, done.stderr[-2000:]


def test_unknown_names_fail():
    with pytest.raises(ImportError):
        importlib.import_module(f"{NAME}.no_such_module")
    with pytest.raises(AttributeError):
        getattr(airflow_provider_melon, "no_such_module")


def test_the_names_a_dag_uses_import_from_their_one_home():
    from airflow_provider_melon.hadoop.app_state import classify, progress_line
    from airflow_provider_melon.hadoop.hdfs_io import put_once, run_slug
    from airflow_provider_melon.hadoop.nodemanager import NodeManagerError
    from airflow_provider_melon.hadoop.rm_json import YarnApiError
    from airflow_provider_melon.hooks.melon import hdfs_home
    from airflow_provider_melon.hooks.yarn import AsyncYarnHook, YarnHook
    from airflow_provider_melon.triggers.yarn import YarnApplicationTrigger

    assert all(map(callable, (hdfs_home, put_once, run_slug, classify, progress_line)))
    assert issubclass(NodeManagerError, YarnApiError) and YarnHook
    assert AsyncYarnHook.__module__ == "airflow_provider_melon.hooks.yarn"  # the sync hook's module (as Livy's)
    assert YarnApplicationTrigger.__module__ == "airflow_provider_melon.triggers.yarn"  # serialized in the DB


def test_paths_relative_to_a_moved_module_still_name_the_checkout():
    """minicluster.py moved one folder down (dev/): its REPO_ROOT (the launcher, the default work dir, `melon up`'s
    DAGs) must still be the checkout's root, and the bundle's PACKAGE_DIR the package."""
    from airflow_provider_melon.dev import minicluster as mc
    from airflow_provider_melon.hadoop import bundle

    assert (mc.REPO_ROOT / "setup.cfg").is_file() and mc.APPMASTER_DIR.is_dir(), mc.REPO_ROOT
    assert bundle.PACKAGE_DIR == PKG
