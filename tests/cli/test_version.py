"""The version is kept in one place: ``taskrunner.__version__``, read by hatch at build time.

The distribution's metadata, ``taskrunner --version`` and the module attribute must
agree; pyproject.toml must not grow a second, static copy that drifts.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import taskrunner

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "taskrunner-queue"


def test_pyproject_reads_the_version_from_the_package_instead_of_keeping_its_own() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())

    assert "version" not in config["project"]
    assert "version" in config["project"]["dynamic"]
    assert config["tool"]["hatch"]["version"]["path"] == "src/taskrunner/__init__.py"


def test_the_module_version_is_the_installed_distributions() -> None:
    # An editable install records the version when it is installed: after a bump,
    # reinstall (nox reinstalls on each run) before trusting this test.
    assert taskrunner.__version__ == version(DISTRIBUTION)


def test_the_command_prints_the_installed_distributions_version() -> None:
    command = Path(sys.executable).with_name("taskrunner")

    result = subprocess.run(
        [str(command), "--version"], capture_output=True, text=True, timeout=60, check=False
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"taskrunner {version(DISTRIBUTION)}"
