"""The pre-commit hooks run the ruff that ``nox -s lint`` runs.

A commit checked by one ruff and CI by another fails on rules or formatting the
developer never saw; the pin lives in the lint group, the hook's rev must follow it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_group_ruff() -> str:
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]
    (pin,) = [p for p in groups["lint"] if isinstance(p, str) and p.startswith("ruff")]
    match = re.fullmatch(r"ruff==([\w.]+)", pin)
    assert match, f"the lint group must pin ruff exactly, got {pin!r}"
    return match.group(1)


def test_both_hooks_install_the_ruff_the_lint_group_pins() -> None:
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    pins = re.findall(r'additional_dependencies: \["ruff==([\w.]+)"\]', config)

    assert len(pins) == 2, "ruff check and ruff format each install ruff"
    assert set(pins) == {lint_group_ruff()}


def test_the_hooks_check_and_format() -> None:
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    hooks = dict(re.findall(r"- id: ([\w-]+)\n\s+name: .*\n\s+entry: (.*)\n", config))

    assert hooks == {
        "ruff-check": "ruff check --fix --force-exclude",
        "ruff-format": "ruff format --force-exclude",
    }
