"""The distribution is ``taskrunner-queue`` (``taskrunner`` on PyPI is someone else's).

The import name and the command stay ``taskrunner``; every install hint must name the
distribution, or ``pip install 'taskrunner[prometheus]'`` installs an unrelated 2017
project.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import distribution
from pathlib import Path

import pytest

from taskrunner import ConfigurationError, Runner
from taskrunner.app import App
from taskrunner_backends.memory import InMemoryQueue

ROOT = Path(__file__).resolve().parents[2]
NAME = "taskrunner-queue"

# "pip install taskrunner", "pip install 'taskrunner[x]'", "pip install \"taskrunner\"":
# the bare name of the wrong project, quoted or not, with or without extras.
WRONG_HINT = re.compile(r"""pip install\s+["']?taskrunner(?![\w-])""")


def test_the_distribution_is_named_taskrunner_queue() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    assert project["name"] == NAME
    assert project["scripts"] == {"taskrunner": "taskrunner.cli:main"}


def test_the_installed_distribution_provides_the_taskrunner_command() -> None:
    # By group: the pytest11 plugin entry point is also named ``taskrunner``.
    scripts = {
        ep.name: ep.value for ep in distribution(NAME).entry_points if ep.group == "console_scripts"
    }

    assert scripts["taskrunner"] == "taskrunner.cli:main"


def files_with_install_hints() -> list[Path]:
    docs = list((ROOT / "docs").glob("*.md"))
    sources = [
        *(ROOT / "src").rglob("*.py"),
        *(ROOT / "src").rglob("*.lua"),
        *(ROOT / "conformance").rglob("*.py"),
    ]
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *docs, *sources]


def test_no_install_hint_names_the_wrong_project() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files_with_install_hints()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if WRONG_HINT.search(line)
    ]

    assert wrong == []


def test_the_metrics_error_names_the_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    from taskrunner.metrics import start_metrics_server

    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # not installed
    runner = Runner(InMemoryQueue(), App("q"))

    with pytest.raises(ConfigurationError) as caught:
        start_metrics_server(runner, 0)

    assert f"pip install '{NAME}[prometheus]'" in str(caught.value)
