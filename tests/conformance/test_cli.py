"""The one-command path, ``python -m taskrunner_conformance MODULE:FACTORY``, in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def conformance(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskrunner_conformance", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_memory_backend_passes_and_the_report_lists_every_property(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"

    done = conformance("tests.conformance.harnesses:memory_harness", "--json", str(report_path))

    assert done.returncode == 0, done.stdout + done.stderr
    assert "RESULT: PASS" in done.stdout
    assert "requires_heartbeat=True" in done.stdout
    report = json.loads(report_path.read_text())
    assert report["passed"] is True
    outcomes = {pid: p["outcome"] for pid, p in report["properties"].items()}
    assert set(outcomes) >= {f"P{i}" for i in range(1, 41)}
    assert outcomes["P28"] == "skipped"  # no inject_raw hook on the in-memory harness
    assert outcomes["P40"] == "passed"
    assert "failed" not in outcomes.values()


def test_broken_backend_fails_with_exit_status_one_naming_the_property() -> None:
    done = conformance("tests.conformance.broken:heartbeat_steals_back", "--properties", "P16")

    assert done.returncode == 1, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("P16 "))
    assert "failed" in line
    assert "RESULT: FAIL" in done.stdout


def test_example_sqlite_backend_passes_through_its_harness() -> None:
    done = conformance("examples.sqlite_backend.harness:SqliteHarness", "-q")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "RESULT: PASS" in done.stdout
    assert "age_lease, restart_backend, storage_size" in done.stdout


def test_bare_queue_factory_runs_on_real_time_without_hooks() -> None:
    done = conformance(
        "examples.sqlite_backend.harness:open_queue", "--properties", "P1,P2,P5,P30", "-q"
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "time: real (waits out leases)" in done.stdout
    assert "P40  not run" in done.stdout


def test_unloadable_factory_exits_with_status_two() -> None:
    done = conformance("no_such_module_anywhere:factory")

    assert done.returncode == 2
    assert "cannot load no_such_module_anywhere:factory" in done.stdout


def test_help_names_the_factory_signature() -> None:
    done = conformance("--help")

    assert done.returncode == 0
    assert "PACKAGE.MODULE:FACTORY" in done.stdout


@pytest.mark.redis
def test_redis_backend_passes_through_the_one_command_path(tmp_path: Path) -> None:
    # The harness reads TASKRUNNER_TEST_REDIS_URL / TASKRUNNER_TEST_SERVER from the
    # environment, which the subprocess inherits.
    report_path = tmp_path / "report.json"

    # The properties the harness's hooks serve, and P1: the whole suite on this harness
    # is tests/conformance/test_redis_conformance.py (once more through here took 80 s).
    done = conformance(
        "tests.conformance.harnesses:redis_harness",
        "--properties",
        "P1,P28,P29,P36,P40",
        "--json",
        str(report_path),
    )

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(report_path.read_text())
    outcomes = {pid: p["outcome"] for pid, p in report["properties"].items()}
    assert outcomes["P1"] == "passed", report["properties"]["P1"]
    # Hooks the Redis harness supplies: none of these may be skipped.
    for hooked in ("P28", "P29", "P36", "P40"):
        assert outcomes[hooked] == "passed", (hooked, report["properties"][hooked])


@pytest.mark.redis
def test_redis_restart_and_outage_properties_pass_on_a_private_server() -> None:
    done = conformance(
        "tests.conformance.harnesses:redis_restartable_harness", "--properties", "P37,P39"
    )

    assert done.returncode == 0, done.stdout + done.stderr
    for pid in ("P37", "P39"):
        line = next(x for x in done.stdout.splitlines() if x.startswith(f"{pid} "))
        assert "passed" in line, line


def test_the_suite_writes_nothing_into_the_directory_it_is_run_from(tmp_path: Path) -> None:
    """No .hypothesis/ (example database, constants cache), no __pycache__, no report."""
    shutil.copytree(ROOT / "examples" / "sqlite_backend", tmp_path / "sqlite_backend")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "taskrunner_conformance",
            "sqlite_backend.harness:SqliteHarness",
            "--properties",
            "P1,P40",
            "-q",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TASKRUNNER_CONFORMANCE_EFFORT": "0.2"},
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "P40  passed" in done.stdout
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert after == before
