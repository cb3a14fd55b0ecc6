"""The contract version a backend declares is reported, and a major the suite does not test fails.

A backend written for another major than the one the suite tests must not be
certified by it (a 0.1.0 backend broke on contract 2 with nothing telling its
author); a backend that declares nothing is named in the report but judged as it was
before declarations existed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from taskrunner.queue import CONTRACT_VERSION
from taskrunner_backends.memory import InMemoryQueue
from taskrunner_conformance import SUITE_VERSION, TESTED_CONTRACT_VERSION, check_contract, main

from .harnesses import subclass_factory


class _DeclaresContractOne(InMemoryQueue):
    contract_version = (1, 0)


class _DeclaresNothing(InMemoryQueue):
    # A backend written before declarations existed: no attribute (None reads the same).
    contract_version = None  # type: ignore[assignment]


class _DeclaresAString(InMemoryQueue):
    contract_version = "2.0"  # type: ignore[assignment]


class _DeclaresANewerMinor(InMemoryQueue):
    contract_version = (TESTED_CONTRACT_VERSION[0], TESTED_CONTRACT_VERSION[1] + 7)


declares_contract_one = subclass_factory(_DeclaresContractOne)
declares_nothing = subclass_factory(_DeclaresNothing)
declares_a_string = subclass_factory(_DeclaresAString)
declares_a_newer_minor = subclass_factory(_DeclaresANewerMinor)

MODULE = "tests.conformance.test_contract_version"
TESTED = f"{TESTED_CONTRACT_VERSION[0]}.{TESTED_CONTRACT_VERSION[1]}"


def run_suite(factory: str, tmp_path: Path) -> tuple[int, list[str], dict[str, Any]]:
    out = io.StringIO()
    report = tmp_path / "report.json"
    status = main(
        [f"{MODULE}:{factory}", "--properties", "P1,P9", "--json", str(report), "-q"], stdout=out
    )
    return status, out.getvalue().splitlines(), json.loads(report.read_text())


def test_the_suite_tests_the_contract_of_the_taskrunner_it_ships_with() -> None:
    # A contract bump must bring the suite's cases (and this constant) along.
    assert TESTED_CONTRACT_VERSION == CONTRACT_VERSION


def test_every_shipped_backend_and_the_example_declare_the_current_contract() -> None:
    from examples.sqlite_backend.queue import SqliteQueue

    from taskrunner_backends.postgres.queue import PostgresQueue
    from taskrunner_backends.redis import PartitionedQueue, RedisStreamsQueue

    for backend in (InMemoryQueue, RedisStreamsQueue, PartitionedQueue, PostgresQueue, SqliteQueue):
        assert backend.contract_version == CONTRACT_VERSION, backend.__name__


def test_a_backend_declaring_another_major_fails_every_test_and_the_run(tmp_path: Path) -> None:
    status, lines, data = run_suite("declares_contract_one", tmp_path)

    assert status == 1
    contract = next(line for line in lines if line.startswith("contract "))
    assert "UNSUPPORTED: the backend declares 1.0" in contract
    assert f"tests contract {TESTED_CONTRACT_VERSION[0]}.x" in contract
    assert "CHANGELOG.md" in contract
    assert lines[-1].startswith("RESULT: FAIL - contract version unsupported")
    # Each test fails with the reason, so a run without the reporter fails too.
    assert any(line.startswith("P1   failed") for line in lines)
    assert any(line.startswith("P9   failed") for line in lines)
    assert data["passed"] is False
    assert data["contract"]["declared"] == [1, 0]
    assert data["contract"]["status"] == "unsupported"
    assert data["contract"]["tested"] == list(TESTED_CONTRACT_VERSION)


def test_a_missing_declaration_is_named_and_judged_as_the_tested_version(tmp_path: Path) -> None:
    status, lines, data = run_suite("declares_nothing", tmp_path)

    assert status == 0
    assert f"contract {check_contract(None).text}" in lines
    assert lines[-1].startswith("RESULT: PASS - every applicable property passed")
    assert lines[-1].endswith(f"; contract version not declared (judged as {TESTED})")
    assert data["passed"] is True
    assert data["contract"]["declared"] is None
    assert data["contract"]["status"] == "not declared"


def test_a_malformed_declaration_fails(tmp_path: Path) -> None:
    status, lines, data = run_suite("declares_a_string", tmp_path)

    assert status == 1
    assert f"contract {check_contract('2.0').text}" in lines
    assert (
        "MALFORMED: contract_version must be a tuple (major, minor)" in check_contract("2.0").text
    )
    assert data["contract"] == {
        "tested": list(TESTED_CONTRACT_VERSION),
        "declared": "'2.0'",
        "status": "malformed",
        "detail": check_contract("2.0").text,
    }


def test_a_newer_minor_passes_saying_what_is_not_tested(tmp_path: Path) -> None:
    status, lines, data = run_suite("declares_a_newer_minor", tmp_path)
    newer = f"{TESTED_CONTRACT_VERSION[0]}.{TESTED_CONTRACT_VERSION[1] + 7}"

    assert status == 0
    assert (
        f"contract {newer} declared; this suite tests up to {TESTED}: what {newer} added is "
        "not tested (a newer taskrunner's suite tests it)"
    ) in lines
    assert data["contract"]["status"] == "newer minor"


def test_the_shipped_memory_backend_is_reported_declaring_the_tested_version() -> None:
    out = io.StringIO()

    status = main(
        ["tests.conformance.harnesses:memory_harness", "--properties", "P1", "-q"], stdout=out
    )

    lines = out.getvalue().splitlines()
    assert status == 0
    assert f"taskrunner conformance report (suite {SUITE_VERSION}, contract {TESTED})" in lines
    assert f"contract {TESTED} declared; this suite tests {TESTED}" in lines
    assert lines[-1].startswith("RESULT: PASS - every applicable property passed")
    assert "not declared" not in lines[-1]


@pytest.mark.parametrize(
    ("declared", "status"),
    [
        (TESTED_CONTRACT_VERSION, "tested"),
        ((TESTED_CONTRACT_VERSION[0], 0), "tested"),
        ((TESTED_CONTRACT_VERSION[0] + 1, 0), "unsupported"),
        ((TESTED_CONTRACT_VERSION[0] - 1, 9), "unsupported"),
        (None, "not declared"),
        ((2,), "malformed"),
        ((2, 0, 1), "malformed"),
        ([2, 0], "malformed"),
        ((True, 0), "malformed"),
        ((2.0, 0), "malformed"),
    ],
)
def test_check_contract_judges_each_kind_of_declaration(declared: object, status: str) -> None:
    check = check_contract(declared)

    assert check.status == status
    assert check.fails == (status in ("unsupported", "malformed"))
