"""Sphinx configuration of the provider's docs (MyST markdown pages, every ``docs/*.md`` through the index's glob
toctree). Built with warnings as errors by ``make test`` (tests/unit/test_docs.py):
``python -m sphinx -W --keep-going -b html docs <out>``."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))  # the provider's own package: its version and provider_info

from airflow_provider_melon import __version__  # noqa: E402

project = "airflow-provider-melon"
author = "airflow-provider-melon contributors"
copyright = "the airflow-provider-melon contributors, Apache-2.0"  # noqa: A001
version = release = __version__

# autodoc: the parameter reference (docs/reference.md) is generated from the classes' own docstrings
extensions = ["myst_parser", "melon_docs", "sphinx.ext.autodoc"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_preserve_defaults = True  # show `conf.getboolean(...)`, not the value read when the docs were built
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "README.md"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
html_theme = "alabaster"  # Sphinx's own default: no extra theme package
html_title = f"airflow-provider-melon {__version__}"
html_static_path: list[str] = []
