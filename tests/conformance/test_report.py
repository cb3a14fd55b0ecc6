"""The report says how strong the certificate is: claims certified or not, boundary counts."""

from __future__ import annotations

import json

import pytest

from taskrunner.queue import Capabilities
from taskrunner_conformance import PROPERTIES, report as report_module
from taskrunner_conformance.report import (
    SUITE_VERSION,
    BackendInfo,
    ConformanceReport,
    PropertyResult,
    TestResult,
)


def make_report(
    capabilities: Capabilities, outcomes: dict[str, TestResult], parts: tuple[str, ...] = ()
) -> ConformanceReport:
    properties = [
        PropertyResult(p, [outcomes[p.id]] if p.id in outcomes else []) for p in PROPERTIES
    ]
    backend = BackendInfo(
        capabilities=capabilities,
        requires_heartbeat=True,
        lease_seconds=1.0,
        time_mode="age",
        hooks=(),
        parts=parts,
    )
    return ConformanceReport(target="t", backend=backend, properties=properties)


def passed(boundaries: int = 0) -> TestResult:
    return TestResult("test_x", "passed", boundaries=boundaries)


def claims(report: ConformanceReport) -> dict[str, str]:
    return {c.claim: c.status for c in report.claims}


def test_a_claim_whose_only_property_was_skipped_is_claimed_not_tested_never_certified() -> None:
    skipped = TestResult("test_restart", "skipped", "harness has no restart_backend hook")
    report = make_report(
        Capabilities(persistent=True, blocking_receive=True),
        {"P1": passed(), "P3": passed(), "P4": passed(), "P37": skipped},
    )

    assert claims(report) == {"persistent": "not tested", "blocking_receive": "certified"}
    text = report.format()
    assert "claimed, not tested (P37): P37 skipped: harness has no restart_backend hook" in text
    assert "certified by P3, P4" in text
    assert report.passed_all_applicable
    verdict = "RESULT: PASS - every applicable property passed; claimed but not tested: persistent"
    assert verdict in text


def test_sharing_across_processes_is_never_reported_as_certified() -> None:
    report = make_report(Capabilities(shared_across_instances=True), {"P1": passed()})

    (claim,) = report.claims
    assert claim.status == "not tested"
    assert "across processes is not checked" in claim.verdict


def test_a_failed_property_fails_its_claim_and_optional_parts_are_claims_too() -> None:
    failed = TestResult("test_fifo", "failed", "AssertionError: out of order")
    report = make_report(
        Capabilities(ordering="fifo"), {"P35": failed, "P8": passed(), "X2": passed()}, ("admin",)
    )

    assert claims(report) == {"ordering=fifo": "failed", "admin": "certified"}
    assert "FAILED: P35" in report.format()
    assert not report.passed_all_applicable


def test_boundary_cases_are_counted_per_property_and_in_total_from_passing_tests_only() -> None:
    shared = passed(boundaries=4)  # one test checking two properties
    report = make_report(Capabilities(), {"P1": passed(boundaries=3), "P2": shared, "P5": shared})
    report.properties[2].tests.append(TestResult("test_failed", "failed", "x", boundaries=9))

    text = report.format()
    assert "(3 boundary cases)" in text
    assert text.count("(4 boundary cases)") == 2
    assert "7 boundary cases checked" in text
    data = json.loads(report.dumps())
    assert data["boundary_cases"] == 7
    assert data["properties"]["P1"]["boundary_cases"] == 3


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (SUITE_VERSION, f"at this suite version ({SUITE_VERSION})"),
        ("0.1", f"measured at suite 0.1, not at this version ({SUITE_VERSION})"),
    ],
)
def test_the_mutation_score_names_the_suite_version_it_was_measured_at(
    version: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    score = {
        "suite_version": version,
        "targets": {"memory": {"killed": 300, "scored": 300, "unexplained": 0}},
    }
    monkeypatch.setattr(report_module, "mutation_score", lambda: score)

    text = make_report(Capabilities(), {"P1": passed()}).format()

    assert f"mutation score of the reference backends {expected}: memory 300/300 killed" in text


def test_the_new_flags_and_parts_are_certified_by_their_own_properties_only() -> None:
    # cancel must not be taken for a mention inside cancel_safe_receive (X3).
    report = make_report(
        Capabilities(cancel=True, leadership=True, delayed_add=True),
        {"X3": passed(), "X46": passed(), "X47": passed(), "X40": passed(), "X50": passed()},
        parts=("scheduling", "leadership"),
    )

    verdicts = {c.claim: c.verdict for c in report.claims}
    assert verdicts["cancel"] == "certified by X46, X47"
    assert verdicts["delayed_add"] == "certified by X40"
    assert verdicts["leadership"] == "certified by X50"
    # The part is listed apart from the flag of the same name.
    assert verdicts["queue.leadership"] == "certified by X50"
    assert verdicts["scheduling"] == "certified by X40, X46, X47"
    assert set(report.to_json()["claims"]) >= {"leadership", "queue.leadership", "scheduling"}
