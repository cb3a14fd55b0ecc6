"""Run mutmut on the backends with the conformance suite as the test command; write the report.

Usage (``nox -s mutation -- ARGS`` passes ARGS here)::

    python -m tests.mutation.run [--target memory|sqlite]... [--jobs N]
                                 [--report-only] [--no-run]

Each target is staged in build/mutation/TARGET/ (a copy of src/, examples/, tests/ and
pyproject.toml with a generated setup.cfg, because mutmut reads its configuration from
the directory it runs in), mutated there from scratch, and its results kept there, so
``--no-run`` can rewrite the report after editing the annotations without running
anything, and a run of one target keeps the other's last results in the report.

The score (killed of the mutants the suite should detect, per target) also goes to
conformance/taskrunner_conformance/mutation_score.json, which the conformance report
prints with the suite version it was measured at.

The exit status is 1 when a mutant survived that tests/mutation/equivalent.toml does not
explain (``--report-only``: 0 all the same), 2 when mutmut itself failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from taskrunner_conformance.report import MUTATION_SCORE_FILE, SUITE_VERSION

from .report import Classified, Mutant, TargetRun, classify, load_annotations, render, score
from .targets import TARGETS, Target

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "build" / "mutation"
ANNOTATIONS = ROOT / "tests" / "mutation" / "equivalent.toml"
REPORT = ROOT / "docs" / "mutation-report.md"
# Shipped with the suite: the conformance report prints the score it records.
SCORE = ROOT / "conformance" / "taskrunner_conformance" / MUTATION_SCORE_FILE

# Copied into each work directory: what the tests import and pytest's configuration.
STAGED = ("src", "examples", "tests", "pyproject.toml")

# The wall-clock limit per mutant is (its tests' clean run time + 1 s) times this; the
# tests of a mutant that hangs are stopped there and it counts as a timeout.
TIMEOUT_MULTIPLIER = 10


def say(text: str) -> None:
    """Progress and results for the person running the session."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _setup_cfg(target: Target) -> str:
    lines = [
        "[mutmut]",
        f"source_paths = {target.source_root}",
        # One glob per line; a plain path matches only that file.
        "only_mutate =",
        *(f"    {path}" for path in target.mutated),
        "pytest_add_cli_args_test_selection =",
        *(f"    {arg}" for arg in target.tests),
        # The randomised model-based test does not count (see plugin.py); no cache
        # directory in the staged copy.
        "pytest_add_cli_args =",
        "    -p",
        "    tests.mutation.plugin",
        "    -p",
        "    no:cacheprovider",
        f"timeout_multiplier = {TIMEOUT_MULTIPLIER}",
    ]
    return "\n".join(lines) + "\n"


def _stage(target: Target, work: Path) -> None:
    """A fresh copy of what the run needs, so every verdict comes from this code."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for name in STAGED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, work / name, ignore=ignore)
        else:
            shutil.copy2(source, work / name)
    (work / "setup.cfg").write_text(_setup_cfg(target), encoding="utf-8")


def _environment(target: Target) -> dict[str, str]:
    env = dict(os.environ)
    env["TASKRUNNER_CONFORMANCE_EFFORT"] = str(target.effort)
    # Only the staged copy may be imported (mutmut puts it first on sys.path).
    env.pop("PYTHONPATH", None)
    return env


def _command(target: Target) -> str:
    return (
        f"{target.description}; `pytest -x {' '.join(target.tests)}` with "
        f"TASKRUNNER_CONFORMANCE_EFFORT={target.effort}, P40 deselected"
    )


def run_target(target: Target, jobs: int) -> bool:
    """Mutate and test `target`; return False when mutmut failed (log in the work dir)."""
    work = WORK / target.name
    _stage(target, work)
    log = work / "mutmut.log"
    files = ", ".join(target.mutated)
    say(f"mutation: {target.name}: mutating {files} (log: {log.relative_to(ROOT)})")
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as output:
        completed = subprocess.run(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs)],
            cwd=work,
            env=_environment(target),
            stdout=output,
            stderr=subprocess.STDOUT,
            check=False,
        )
    seconds = time.monotonic() - started
    if completed.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        say(f"mutation: {target.name}: mutmut failed ({completed.returncode}):\n{tail}")
        return False
    from .mutants import read_mutants  # needs mutmut: only in the mutation session

    mutants = [m for path in target.mutated for m in read_mutants(work, path)]
    run = {
        "target": target.name,
        "mutated": list(target.mutated),
        "command": _command(target),
        "seconds": round(seconds, 1),
        "jobs": jobs,
        "tool": f"mutmut {version('mutmut')}",
        "finished_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "mutants": [m.to_json() for m in mutants],
    }
    (work / "results.json").write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
    say(f"mutation: {target.name}: {len(mutants)} mutants in {seconds:.0f} s")
    return True


def load_run(target: Target) -> TargetRun | None:
    """The last results of `target`, if it ever ran here."""
    path = WORK / target.name / "results.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return TargetRun(
        target=data["target"],
        # A single string: results written before a target could mutate several files.
        mutated=(data["mutated"],) if isinstance(data["mutated"], str) else tuple(data["mutated"]),
        command=data["command"],
        mutants=tuple(Mutant.from_json(m) for m in data["mutants"]),
        seconds=float(data["seconds"]),
        jobs=int(data["jobs"]),
        tool=data["tool"],
        finished_at=data["finished_at"],
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nox -s mutation --", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument(
        "--target",
        action="append",
        choices=sorted(TARGETS),
        help="run only this target (repeatable; default: all)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=2,
        metavar="N",
        help="mutants tested in parallel (default 2)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="write the report but exit 0 even when survivors are not explained",
    )
    parser.add_argument(
        "--no-run",
        action="store_true",
        help="do not run mutmut: rewrite the report from the last results",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected targets, write docs/mutation-report.md, return the exit status."""
    options = _parser().parse_args(argv)
    if options.jobs < 1:
        say("mutation: --jobs must be at least 1")
        return 2
    selected = [TARGETS[name] for name in options.target or sorted(TARGETS)]
    annotations = load_annotations(ANNOTATIONS)
    if not options.no_run:
        for target in selected:
            if not run_target(target, options.jobs):
                return 2
    results: list[Classified] = []
    for target in TARGETS.values():
        run = load_run(target)
        if run is not None:
            results.append(classify(run, annotations))
    if not results:
        say("mutation: no results yet; run without --no-run first")
        return 2
    REPORT.write_text(render(results, suite_version=SUITE_VERSION), encoding="utf-8")
    document = score(results, suite_version=SUITE_VERSION)
    SCORE.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    say(f"mutation: report written to {REPORT.relative_to(ROOT)} and {SCORE.relative_to(ROOT)}")
    unexplained = 0
    for result in results:
        missing = len(result.unexplained)
        unexplained += missing
        say(
            f"mutation: {result.run.target}: {len(result.run.mutants)} mutants, "
            f"{len(result.detected)} detected, {missing} survived without explanation"
        )
    if unexplained and not options.report_only:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
