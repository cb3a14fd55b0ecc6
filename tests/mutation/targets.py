"""The two backends whose mutants the conformance suite must kill, and how each is tested.

Each target names the files mutmut mutates (the memory backend is a package: all of its
modules) and the pytest selection that runs the conformance suite against it. The suite
settings are fixed so that a verdict is the same on every run: no randomised test
(tests/mutation/plugin.py deselects P40) and the workload size given by ``effort``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["TARGETS", "Target"]

_ROOT = Path(__file__).resolve().parents[2]


def _modules_of(package: str) -> tuple[str, ...]:
    """Every module of `package` (a directory relative to the repository root), sorted.

    Read from the tree, so a module added to the package is mutated without an edit here.
    """
    return tuple(
        path.relative_to(_ROOT).as_posix() for path in sorted((_ROOT / package).glob("*.py"))
    )


@dataclass(frozen=True, kw_only=True)
class Target:
    """One backend under mutation.

    Attributes:
        name: Short name used on the command line and in the report.
        mutated: The files whose mutants are run, relative to the repository root, in
            the order the report lists them. With more than one, every annotation of
            the target names its ``file``.
        source_root: The directory mutmut copies (and puts first on ``sys.path``) so
            that the mutated module shadows the installed one.
        tests: pytest arguments selecting the conformance suite on this backend.
        effort: ``TASKRUNNER_CONFORMANCE_EFFORT`` for the run (workload sizes).
        description: How the suite reaches the backend, for the report.
    """

    name: str
    mutated: tuple[str, ...]
    source_root: str
    tests: tuple[str, ...]
    effort: float
    description: str


TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target(
            name="memory",
            # url.py too: its functions are outside the contract, and equivalent.toml
            # says so ([[function]]); a mutant the suite does reach there must be explained.
            mutated=_modules_of("src/taskrunner_backends/memory"),
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
            mutated=("examples/sqlite_backend/queue.py",),
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
