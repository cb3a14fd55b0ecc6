"""The suite has teeth: each deliberately broken backend fails on the property naming its defect.

Each run goes through `taskrunner_conformance.run`, the function behind the command
line, on the defect's property and the ones every broken backend must still pass, at
a third of the usual effort (the defects show on small workloads too). Hypothesis
shrinking is off: only *that* the model-based test fails matters here, not a minimal
example. That the real backends pass the same suite is asserted by
test_memory_conformance, test_redis_conformance and test_cli.
"""

from __future__ import annotations

import pytest

from taskrunner_conformance import ConformanceReport, run

from .broken import BROKEN

# Properties every broken backend still passes: the defects are narrow, and a suite
# that failed everything would prove nothing.
UNAFFECTED = ("P2", "P3", "P4", "P5", "P6", "P34", "P35")

# Where the defect is one of those too: returning more than max_batch is what P5 checks.
ALSO_FAILS = {"exceeds_max_batch": ("P5",)}


def outcomes(report: ConformanceReport) -> dict[str, str]:
    return {result.definition.id: result.outcome for result in report.properties}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_backend_fails_the_property_naming_its_defect(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKRUNNER_CONFORMANCE_SHRINK", "0")
    monkeypatch.setenv("TASKRUNNER_CONFORMANCE_EFFORT", "0.3")
    factory, defect = BROKEN[name]

    # Only the properties asserted on: the whole suite, 109 times, was 4-5 minutes of CI.
    report = run(factory, properties=[defect, *UNAFFECTED], quiet=True)

    results = outcomes(report)
    assert results[defect] == "failed", f"{name} did not fail {defect}:\n{report.format()}"
    assert not report.passed_all_applicable
    also_failing = ALSO_FAILS.get(name, ())
    assert all(results[p] == "failed" for p in also_failing), (also_failing, results)
    still_passing = {p: results[p] for p in UNAFFECTED if p not in also_failing}
    # The whole report: a property that fails here only under load must say why.
    assert set(still_passing.values()) == {"passed"}, f"{still_passing}\n{report.format()}"
    # A failing case leaves nothing for the collector to complain of (a coroutine made
    # and never awaited): left behind, it failed another property minutes later.
    leftovers = [t.reason for p in report.properties for t in p.tests if "ignored in" in t.reason]
    assert not leftovers, leftovers
