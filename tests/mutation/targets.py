"""The two backends whose mutants the conformance suite must kill, and how each is tested.

Each target names the one file mutmut mutates and the pytest selection that runs the
conformance suite against it. The suite settings are fixed so that a verdict is the
same on every run: no randomised test (tests/mutation/plugin.py deselects P40) and the
workload size given by ``effort``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TARGETS", "Target"]


@dataclass(frozen=True, kw_only=True)
class Target:
    """One backend under mutation.

    Attributes:
        name: Short name used on the command line and in the report.
        mutated: The file whose mutants are run, relative to the repository root.
        source_root: The directory mutmut copies (and puts first on ``sys.path``) so
            that the mutated module shadows the installed one.
        tests: pytest arguments selecting the conformance suite on this backend.
        effort: ``TASKRUNNER_CONFORMANCE_EFFORT`` for the run (workload sizes).
        description: How the suite reaches the backend, for the report.
    """

    name: str
    mutated: str
    source_root: str
    tests: tuple[str, ...]
    effort: float
    description: str


TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target(
            name="memory",
            mutated="src/taskrunner_backends/memory.py",
            source_root="src",
            tests=("tests/conformance/test_memory_conformance.py",),
            # Simulated time makes the whole suite take about a second: full workloads.
            effort=1.0,
            description=(
                "tests/conformance/test_memory_conformance.py: the suite on a fake clock, "
                "with requires_heartbeat=True and False"
            ),
        ),
        Target(
            name="sqlite",
            mutated="examples/sqlite_backend/queue.py",
            source_root="examples",
            tests=("tests/mutation/sqlite_suite.py",),
            # Real time: half the workloads gave the same verdict for every mutant as full ones
            # (two runs compared), in 150 s instead of 200 s.
            effort=0.5,
            description=(
                "tests/mutation/sqlite_suite.py: the suite with SqliteHarness (real time, "
                "leases expired by the age_lease hook)"
            ),
        ),
    )
}
