"""The dashboard is optional: only it imports its web libraries, and only the CLI imports it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WEB_LIBRARIES = {"starlette", "uvicorn", "jinja2"}
# Lazily, inside the command's function: `taskrunner --help` needs no extra.
DASHBOARD_IMPORTERS = {"src/taskrunner/cli/dashboard.py", "src/taskrunner/cli/demo.py"}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def _sources() -> list[Path]:
    return [p for top in ("src", "conformance") for p in sorted((ROOT / top).rglob("*.py"))]


def test_only_the_dashboard_imports_starlette_uvicorn_or_jinja2() -> None:
    offenders = []
    for path in _sources():
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("src/taskrunner/dashboard/"):
            continue
        used = {name.partition(".")[0] for name in _imports(path)} & WEB_LIBRARIES
        if used:
            offenders.append(f"{relative}: {sorted(used)}")
    assert offenders == []


def test_only_the_cli_imports_the_dashboard() -> None:
    offenders = []
    for path in _sources():
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("src/taskrunner/dashboard/") or relative in DASHBOARD_IMPORTERS:
            continue
        if any(name.startswith("taskrunner.dashboard") for name in _imports(path)):
            offenders.append(relative)
    assert offenders == []


def test_the_command_line_loads_without_the_web_libraries() -> None:
    code = (
        "import sys, taskrunner, taskrunner.cli\n"
        "taskrunner.cli._parser()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{sorted(WEB_LIBRARIES)!r} or m.startswith('taskrunner.dashboard')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
