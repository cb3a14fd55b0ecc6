"""The dashboard tests need the ``dashboard`` extra; without it they are not collected."""

from __future__ import annotations

from importlib.util import find_spec

# Not a skip per test: without Starlette the modules cannot even be imported. The nox
# sessions install the extra, so CI always collects them.
collect_ignore_glob = [] if find_spec("starlette") and find_spec("jinja2") else ["test_*.py"]
