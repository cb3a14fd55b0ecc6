"""The conformance report: per-property results collected from a pytest run.

`ConformanceReporter` is a pytest plugin. The command-line path
(`taskrunner_conformance.runner`) always installs it; in your own test run, add
``-p taskrunner_conformance.report`` to get the same report at the end of pytest's
output. It is inert otherwise: tests without property ids are ignored.

A property passes when every test checking it passed, fails when any failed, and is
skipped (not applicable to this backend) when all were skipped; the reason shown is
the skip reason or the first failure's message.

The report also says how strong the certificate is: how many boundary cases each
property checked (edges of deadlines, stale receipts of each kind, extreme inputs:
counted by the tests through `note_boundaries`), which claims of the backend a test
exercised ("certified") and which none could ("claimed, not tested"), and the
mutation score the suite reached on the reference backends at this suite version.

It also checks the contract version the backend declares (its queue's
``contract_version``, see `taskrunner.queue.CONTRACT_VERSION`): a major this suite
does not test fails every test and the run; a missing declaration is named in the
report's ``contract`` line and verdict, and the run judged as for this suite's version.
"""

from __future__ import annotations

import gc
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any, Literal

import pytest

from taskrunner.queue import Capabilities

from .properties import PROPERTIES, Property

__all__ = [
    "SUITE_VERSION",
    "TESTED_CONTRACT_VERSION",
    "ConformanceReport",
    "ConformanceReporter",
    "ContractCheck",
    "PropertyResult",
    "TestResult",
    "check_contract",
    "mutation_score",
    "note_backend",
    "note_boundaries",
]

Outcome = Literal["passed", "failed", "skipped"]

SUITE_VERSION = "1.7"

TESTED_CONTRACT_VERSION = (2, 2)
"""The contract version the cases were written against, (major, minor).

Kept apart from `taskrunner.queue.CONTRACT_VERSION` on purpose: a test fails when the
two differ, so a contract change cannot ship without the suite being brought up to it.
"""

# Where a backend author reads what changed between two majors.
_MIGRATION_HINT = 'CHANGELOG.md, "Backend contract", says what changed and how to migrate'

ContractStatus = Literal["tested", "newer minor", "not declared", "unsupported", "malformed"]


@dataclass(frozen=True, slots=True)
class ContractCheck:
    """The contract version a backend declares, against the one this suite tests.

    Attributes:
        declared: The queue's ``contract_version`` as found; None when it has none.
        version: `declared` when it is a well-formed (major, minor), else None.
        status: ``tested`` (this suite's major, a minor it knows), ``newer minor``
            (this major, a later minor: what that minor added is not tested), ``not
            declared`` (judged as `TESTED_CONTRACT_VERSION`), ``unsupported`` (another
            major) or ``malformed`` (not two whole numbers).
        text: The report's ``contract`` line, without its label.
    """

    declared: object
    version: tuple[int, int] | None
    status: ContractStatus
    text: str

    @property
    def fails(self) -> bool:
        """True when the suite cannot certify the backend under its declaration."""
        return self.status in ("unsupported", "malformed")


def _version_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def check_contract(declared: object) -> ContractCheck:
    """Judge a declared ``contract_version`` against `TESTED_CONTRACT_VERSION`."""
    tested = TESTED_CONTRACT_VERSION
    tested_text = _version_text(tested)
    if declared is None:
        return ContractCheck(
            None,
            None,
            "not declared",
            f"NOT DECLARED: the queue has no contract_version; judged as {tested_text}, "
            "the version this suite tests (declare it: contract_version = "
            "taskrunner.queue.CONTRACT_VERSION on the queue class)",
        )
    if not (
        isinstance(declared, tuple)
        and len(declared) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) for n in declared)
    ):
        return ContractCheck(
            declared,
            None,
            "malformed",
            f"MALFORMED: contract_version must be a tuple (major, minor) of two whole "
            f"numbers, like taskrunner.queue.CONTRACT_VERSION {tested!r}; got {declared!r}",
        )
    version = (int(declared[0]), int(declared[1]))
    text = _version_text(version)
    if version[0] != tested[0]:
        return ContractCheck(
            declared,
            version,
            "unsupported",
            f"UNSUPPORTED: the backend declares {text}; this suite tests contract "
            f"{tested[0]}.x (up to {tested_text}) only; {_MIGRATION_HINT}",
        )
    if version[1] > tested[1]:
        return ContractCheck(
            declared,
            version,
            "newer minor",
            f"{text} declared; this suite tests up to {tested_text}: what {text} added is "
            "not tested (a newer taskrunner's suite tests it)",
        )
    return ContractCheck(
        declared, version, "tested", f"{text} declared; this suite tests {tested_text}"
    )


@dataclass(slots=True)
class TestResult:
    """One test's outcome.

    Attributes:
        name: The test function's name.
        outcome: passed, failed or skipped.
        reason: The skip reason or the failure's first line.
        seconds: Time spent in the test.
        boundaries: Boundary cases the test checked (see `note_boundaries`).
    """

    __test__ = False  # not a pytest test class, despite the name

    name: str
    outcome: Outcome
    reason: str = ""
    seconds: float = 0.0
    boundaries: int = 0


@dataclass(slots=True)
class PropertyResult:
    """One property's aggregated outcome.

    Attributes:
        definition: The property.
        tests: Results of the tests that check it (empty when none ran).
    """

    definition: Property
    tests: list[TestResult] = field(default_factory=list)

    @property
    def outcome(self) -> Outcome | Literal["not run"]:
        """Failed if any test failed, passed if any passed, skipped if all skipped."""
        outcomes = {t.outcome for t in self.tests}
        if "failed" in outcomes:
            return "failed"
        if "passed" in outcomes:
            return "passed"
        return "skipped" if outcomes else "not run"

    @property
    def boundaries(self) -> int:
        """Boundary cases checked by its passing tests."""
        return sum(t.boundaries for t in self.tests if t.outcome == "passed")

    @property
    def reason(self) -> str:
        """Why it failed or was skipped."""
        for wanted in ("failed", "skipped"):
            for test in self.tests:
                if test.outcome == wanted and self.outcome == wanted:
                    return test.reason
        return ""


@dataclass(slots=True)
class BackendInfo:
    """What the backend claimed, as seen by the first test that opened a queue."""

    capabilities: Capabilities | None = None
    requires_heartbeat: bool | None = None
    lease_seconds: float | None = None
    time_mode: str = ""
    hooks: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()
    contract_version: object = None

    @property
    def contract(self) -> ContractCheck:
        """The declared contract version, judged (see `check_contract`)."""
        return check_contract(self.contract_version)


_observed = BackendInfo()
_boundaries_in_this_test = 0


def note_boundaries(count: int = 1) -> None:
    """Count `count` boundary cases checked by the running test (shown in the report).

    A boundary case is one check where a wrong backend could plausibly differ: one
    side of a deadline, one kind of stale receipt for one operation, one extreme input.
    The reporter resets the count when each test starts.
    """
    global _boundaries_in_this_test
    _boundaries_in_this_test += count


def note_backend(
    capabilities: Capabilities,
    *,
    requires_heartbeat: bool,
    lease_seconds: float,
    time_mode: str,
    hooks: Iterable[str],
    parts: Iterable[str] = (),
    contract_version: object = None,
) -> None:
    """Record what the backend under test claims (called by every scenario).

    Args:
        capabilities: What the backend claims (or the harness's override).
        requires_heartbeat: The queue's `requires_heartbeat`.
        lease_seconds: The harness's lease.
        time_mode: ``clock``, ``age`` or ``real``.
        hooks: The harness hooks detected.
        parts: The optional parts the queue offers.
        contract_version: The queue's ``contract_version`` (None when it has none).

    Raises:
        AssertionError: The backend declares a contract major this suite does not test,
            or a malformed version: every test fails with the reason, also when the
            suite runs without the reporter.
    """
    _observed.capabilities = capabilities
    _observed.requires_heartbeat = requires_heartbeat
    _observed.lease_seconds = lease_seconds
    _observed.time_mode = time_mode
    _observed.hooks = tuple(hooks)
    _observed.parts = tuple(parts)
    _observed.contract_version = contract_version
    contract = _observed.contract
    if contract.fails:
        raise AssertionError(f"contract version {contract.text}")


@dataclass(slots=True)
class ConformanceReport:
    """The results of one run.

    Attributes:
        target: What was tested (the factory spec or a description).
        backend: The claims and hooks observed.
        properties: One result per property, in property order.
        pytest_exit_code: pytest's exit status (0 ok, 1 failures, 2+ errors).
        errors: Collection or internal errors outside any test.
    """

    target: str
    backend: BackendInfo
    properties: list[PropertyResult]
    pytest_exit_code: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[PropertyResult]:
        """Properties with a failing test."""
        return [p for p in self.properties if p.outcome == "failed"]

    @property
    def passed_all_applicable(self) -> bool:
        """True when nothing failed, something passed and pytest itself had no errors.

        A backend declaring a contract major this suite does not test never passes.
        """
        return (
            not self.failed
            and not (self.backend.capabilities is not None and self.backend.contract.fails)
            and not self.errors
            and any(p.outcome == "passed" for p in self.properties)
            and self.pytest_exit_code in (0, 1)
        )

    def format(self) -> str:
        """The human-readable report."""
        info = self.backend
        lines = [
            f"taskrunner conformance report (suite {SUITE_VERSION}, "
            f"contract {_version_text(TESTED_CONTRACT_VERSION)})",
            f"target   {self.target}",
        ]
        if info.capabilities is not None:
            lines.append(f"contract {info.contract.text}")
            caps = info.capabilities
            # Every boolean flag, so flags added to Capabilities show up by themselves.
            flags = [f for f in caps.__struct_fields__ if isinstance(getattr(caps, f), bool)]
            claimed = [name for name in flags if getattr(caps, name)]
            unclaimed = [name for name in flags if not getattr(caps, name)]
            lines += [
                f"claims   {', '.join(claimed) or '(none)'}; ordering={caps.ordering}; "
                f"max_batch={caps.max_batch}; "
                f"lease_precision_seconds={caps.lease_precision_seconds:g}",
                f"         not claimed: {', '.join(unclaimed) or '(none)'}",
                f"queue    requires_heartbeat={info.requires_heartbeat}; "
                f"lease {info.lease_seconds:g}s; time: {_time_text(info.time_mode)}",
                f"parts    {', '.join(info.parts) or '(none)'}",
                f"hooks    {', '.join(info.hooks) or '(none)'}",
                "",
                "claims checked",
            ]
            width = max((len(c.claim) for c in self.claims), default=0)
            lines += [f"  {c.claim:<{width}}  {c.verdict}" for c in self.claims]
        else:
            lines.append("claims   (no queue was opened)")
        lines.append("")
        width = max(len(p.definition.name) for p in self.properties)
        for result in self.properties:
            prop = result.definition
            detail = result.reason or prop.summary
            if prop.adapted and result.outcome != "failed":
                detail = f"{detail} [adapted: {prop.adapted}]"
            if result.boundaries:
                plural = "s" if result.boundaries > 1 else ""
                detail = f"{detail} ({result.boundaries} boundary case{plural})"
            lines.append(f"{prop.id:<4} {result.outcome:<8} {prop.name:<{width}}  {detail}")
            if result.outcome == "failed":
                lines.extend(
                    f"{'':14}x {t.name}: {t.reason}" for t in result.tests if t.outcome == "failed"
                )
        lines.extend(f"error    {e}" for e in self.errors)
        counts = dict.fromkeys(("passed", "failed", "skipped", "not run"), 0)
        for result in self.properties:
            counts[result.outcome] += 1
        lines += [
            "",
            f"{counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['skipped']} skipped (not applicable), {counts['not run']} not run; "
            f"{self.boundaries} boundary cases checked",
            _mutation_text(mutation_score()),
            _verdict(self),
        ]
        return "\n".join(lines)

    @property
    def boundaries(self) -> int:
        """Boundary cases checked by the passing tests, each test counted once."""
        tests = {id(t): t for r in self.properties for t in r.tests if t.outcome == "passed"}
        return sum(t.boundaries for t in tests.values())

    @property
    def claims(self) -> list[ClaimResult]:
        """Each claim of the backend (capability or optional part) and whether it was tested."""
        caps = self.backend.capabilities
        if caps is None:
            return []
        claimed: list[tuple[str, str]] = [
            (name, f"capabilities.{name}")
            for name in caps.__struct_fields__
            if isinstance(getattr(caps, name), bool) and getattr(caps, name)
        ]
        if caps.ordering != "none":
            claimed.append((f"ordering={caps.ordering}", "capabilities.ordering"))
        if caps.max_batch is not None:
            claimed.append((f"max_batch={caps.max_batch}", "capabilities.max_batch"))
        flags = {label for label, _ in claimed}
        # A part named like a flag (leadership) is labelled by its accessor, so the two
        # claims stay apart in the report and in its JSON.
        claimed += [
            (f"queue.{part}" if part in flags else part, f"queue.{part}")
            for part in self.backend.parts
        ]
        return [self._claim(label, gate) for label, gate in claimed]

    def _claim(self, label: str, gate: str) -> ClaimResult:
        results = [r for r in self.properties if gate in _gate_terms(r.definition.gate)]
        ids = [r.definition.id for r in results]
        failed = [r.definition.id for r in results if r.outcome == "failed"]
        passed = [r.definition.id for r in results if r.outcome == "passed"]
        if failed:
            return ClaimResult(label, "failed", f"FAILED: {', '.join(failed)}")
        untestable = _UNTESTABLE.get(gate)
        if passed:
            text = f"certified by {', '.join(passed)}"
            if untestable:
                text += f"; not tested: {untestable}"
            return ClaimResult(label, "certified", text)
        if untestable:
            return ClaimResult(label, "not tested", f"claimed, not tested: {untestable}")
        if not results:
            return ClaimResult(label, "not tested", "claimed, not tested: no property checks it")
        why = "; ".join(f"{r.definition.id} {r.outcome}: {r.reason}" for r in results if r.reason)
        return ClaimResult(
            label, "not tested", f"claimed, not tested ({', '.join(ids)}): {why or 'not run'}"
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form: target, claims and every property with its tests."""
        caps = self.backend.capabilities
        contract = self.backend.contract
        declared: list[int] | str | None = (
            list(contract.version)
            if contract.version is not None
            else None
            if contract.declared is None
            else repr(contract.declared)
        )
        return {
            "suite_version": SUITE_VERSION,
            "contract": {
                "tested": list(TESTED_CONTRACT_VERSION),
                "declared": declared,
                "status": contract.status if caps is not None else "no queue was opened",
                "detail": contract.text,
            },
            "target": self.target,
            "passed": self.passed_all_applicable,
            "capabilities": None
            if caps is None
            else {f: getattr(caps, f) for f in caps.__struct_fields__},
            "requires_heartbeat": self.backend.requires_heartbeat,
            "claims": {c.claim: {"status": c.status, "detail": c.verdict} for c in self.claims},
            "boundary_cases": self.boundaries,
            "mutation_score": mutation_score(),
            "hooks": list(self.backend.hooks),
            "parts": list(self.backend.parts),
            "errors": self.errors,
            "properties": {
                r.definition.id: {
                    "name": r.definition.name,
                    "outcome": r.outcome,
                    "reason": r.reason,
                    "boundary_cases": r.boundaries,
                    "tests": [
                        {
                            "name": t.name,
                            "outcome": t.outcome,
                            "reason": t.reason,
                            "seconds": round(t.seconds, 3),
                            "boundary_cases": t.boundaries,
                        }
                        for t in r.tests
                    ],
                }
                for r in self.properties
            },
        }

    def dumps(self) -> str:
        """`to_json` as a JSON string."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True)


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """What the run showed about one claim of the backend.

    Attributes:
        claim: The capability (``blocking_receive``, ``ordering=fifo``...) or part (``admin``).
        status: ``certified`` (a test exercised it and passed), ``failed``, or
            ``not tested`` (claimed, but no test could exercise it on this harness).
        verdict: The line the report prints.
    """

    claim: str
    status: Literal["certified", "failed", "not tested"]
    verdict: str


# Claims the suite cannot exercise whatever the harness offers, and why.
_UNTESTABLE = {
    "capabilities.shared_across_instances": (
        "handles are opened in one process (sharing across processes is not checked)"
    ),
}

MUTATION_SCORE_FILE = "mutation_score.json"


def mutation_score() -> dict[str, Any] | None:
    """The mutation score of the reference backends recorded by ``nox -s mutation``.

    None when no score was recorded. The data names the suite version it was measured
    at; the report says so when that is not this version.
    """
    try:
        text = resources.files(__package__).joinpath(MUTATION_SCORE_FILE).read_text("utf-8")
    except (FileNotFoundError, OSError):
        return None
    data = json.loads(text)
    return data if isinstance(data, dict) else None


def _mutation_text(score: dict[str, Any] | None) -> str:
    if not score:
        return "mutation score of the reference backends: not recorded"
    parts = [
        f"{name} {t['killed']}/{t['scored']} killed ({t['unexplained']} unexplained)"
        for name, t in sorted(score.get("targets", {}).items())
    ]
    version = score.get("suite_version")
    where = (
        f"at this suite version ({version})"
        if version == SUITE_VERSION
        else f"measured at suite {version}, not at this version ({SUITE_VERSION})"
    )
    return f"mutation score of the reference backends {where}: {'; '.join(parts)}"


def _verdict(report: ConformanceReport) -> str:
    contract = report.backend.contract
    opened = report.backend.capabilities is not None
    if opened and contract.fails:
        return f"RESULT: FAIL - contract version {contract.status}: {contract.text}"
    if report.passed_all_applicable:
        untested = [c.claim for c in report.claims if c.status == "not tested"]
        verdict = "RESULT: PASS - every applicable property passed"
        if untested:
            verdict += f"; claimed but not tested: {', '.join(untested)}"
        if contract.status == "not declared":
            verdict += (
                "; contract version not declared (judged as "
                f"{_version_text(TESTED_CONTRACT_VERSION)})"
            )
        return verdict
    if report.failed:
        return f"RESULT: FAIL - {', '.join(p.definition.id for p in report.failed)}"
    if report.errors or report.pytest_exit_code not in (0, 1, 5):
        return f"RESULT: ERROR - pytest exited with status {report.pytest_exit_code}"
    return "RESULT: NOTHING APPLICABLE RAN - no selected property applies to this backend"


def _gate_terms(gate: str) -> set[str]:
    """The capability, part and hook names a gate mentions, as whole words.

    Whole words, so ``capabilities.cancel`` is not taken for a mention inside
    ``capabilities.cancel_safe_receive``.
    """
    return set(re.findall(r"[A-Za-z_][\w.]*", gate))


def _time_text(mode: str) -> str:
    return {
        "clock": "simulated (harness clock)",
        "age": "real, leases expired by the age_lease hook",
        "real": "real (waits out leases)",
    }.get(mode, mode or "?")


def _short(text: str, limit: int = 300) -> str:
    first = " ".join(text.strip().split())
    return first if len(first) <= limit else first[: limit - 3] + "..."


class ConformanceReporter:
    """pytest plugin: maps tests to property ids, records outcomes, builds the report.

    Args:
        target: Shown on the report's first line.
        select: Run only tests checking these property ids (None: all).
        print_report: Print the report in pytest's terminal summary.
    """

    def __init__(
        self, target: str = "", *, select: Sequence[str] | None = None, print_report: bool = True
    ) -> None:
        self.target = target
        self.select = None if select is None else {s.strip().upper() for s in select}
        self.print_report = print_report
        self._ids: dict[str, tuple[str, ...]] = {}
        self._results: dict[str, TestResult] = {}
        self._names: dict[str, str] = {}
        self.exit_code = 0
        self.errors: list[str] = []
        self._failed_calls: set[str] = set()

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Note each test's property ids; drop tests outside the selection."""
        kept, dropped = [], []
        for item in items:
            ids = tuple(getattr(getattr(item, "obj", None), "conformance_properties", ()))
            if ids:
                self._ids[item.nodeid] = ids
                self._names[item.nodeid] = getattr(item, "name", item.nodeid)
            if self.select is not None and ids and not set(ids) & self.select:
                dropped.append(item)
            else:
                kept.append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Start counting the boundary cases of `item`."""
        global _boundaries_in_this_test
        _boundaries_in_this_test = 0

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        """After a failed test, collect what its traceback held, before pytest's check.

        A failed test's frames stay referenced from ``sys.last_*`` until the next test
        starts and are collected at some later moment; anything they held that complains
        when collected (a coroutine created and never awaited, say) was then reported
        as a failure of whatever property ran at that moment (in CI, P34 of another
        backend). Here it is reported against the test that left it (see
        `pytest_runtest_logreport`).
        """
        if item.nodeid in self._failed_calls:
            for name in ("last_type", "last_value", "last_traceback", "last_exc"):
                if hasattr(sys, name):
                    delattr(sys, name)
            gc.collect()

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Remember collection errors: they fail the run."""
        if report.failed:
            self.errors.append(f"collecting {report.nodeid or '.'}: {_short(report.longreprtext)}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Record the outcome of each phase; a failing setup or teardown fails the test."""
        if report.nodeid not in self._ids:
            return
        name = self._names[report.nodeid]
        current = self._results.get(report.nodeid)
        if report.when == "call" and report.failed:
            self._failed_calls.add(report.nodeid)
        if report.when == "teardown" and report.failed and current and current.outcome == "failed":
            # Already failed: what its teardown found is added to the reason.
            reason = f"{current.reason}; at teardown: {_failure_reason(report)}"
            self._results[report.nodeid] = replace(current, reason=_short(reason, 600))
            return
        if report.when == "call" or report.failed or (report.skipped and current is None):
            outcome: Outcome = "failed" if report.failed else report.outcome
            reason = ""
            if report.skipped:
                reason = _skip_reason(report)
            elif report.failed:
                reason = _failure_reason(report)
            if current is None or current.outcome != "failed":
                seconds = report.duration + (current.seconds if current else 0.0)
                self._results[report.nodeid] = TestResult(
                    name, outcome, reason, seconds, boundaries=_boundaries_in_this_test
                )

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Keep pytest's exit status."""
        self.exit_code = int(exitstatus)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Print the report after pytest's own summary."""
        if self.print_report and self._ids:
            terminalreporter.write_sep("=", "conformance report")
            terminalreporter.write_line(self.report().format())

    def report(self) -> ConformanceReport:
        """The report for what ran so far."""
        by_property: dict[str, PropertyResult] = {p.id: PropertyResult(p) for p in PROPERTIES}
        for nodeid, ids in self._ids.items():
            result = self._results.get(nodeid)
            if result is None:
                continue
            for property_id in ids:
                if property_id in by_property:
                    by_property[property_id].tests.append(result)
        return ConformanceReport(
            target=self.target,
            backend=_observed,
            properties=list(by_property.values()),
            pytest_exit_code=self.exit_code,
            errors=list(self.errors),
        )


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return _short(str(longrepr[2]).removeprefix("Skipped: "))
    return _short(str(longrepr))


def _failure_reason(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    reason = (
        message
        if message
        else report.longreprtext.splitlines()[-1:][0]
        if report.longreprtext
        else "failed"
    )
    # pytest groups what the collector reported: name the first object it was about.
    ignored = re.search(r"Exception ignored in: (.*)", report.longreprtext)
    if ignored and ignored.group(1) not in reason:
        reason = f"{reason} (first: exception ignored in {ignored.group(1)})"
    return _short(reason)


def pytest_configure(config: pytest.Config) -> None:
    """Install a reporter when loaded with ``-p taskrunner_conformance.report``."""
    if not config.pluginmanager.has_plugin("taskrunner-conformance-reporter"):
        config.pluginmanager.register(
            ConformanceReporter("pytest run"), "taskrunner-conformance-reporter"
        )
