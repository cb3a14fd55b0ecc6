"""How many defect classes a version of the suite catches deterministically.

Usage::

    python -m tests.conformance.catch_rate [--ref REV] [--runs N] [--jobs N] [--json PATH]
        [--only NAME,...]

Runs the suite of this checkout, and the suite as it was at git revision ``REV`` (its
``conformance/`` directory, first on ``sys.path``), several times against every broken
backend of tests/conformance/broken.py (each breaks one sentence of the contract, and
all are built on this checkout's memory backend). A backend is

* **caught** when every run fails a property other than the random model-based test
  (P40), and with the property that names its defect for the current suite;
* **by chance** when some run passed, or only P40 failed;
* **missed** when every run passed.

It prints one line per backend and the totals; ``--json`` writes them too. It takes a
few minutes (two suites x backends x runs, each a whole-suite run on simulated time);
``--only`` measures the named backends (or a file's group: ``results`` for
broken_results.py) alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .broken import BROKEN
from .broken_results import BROKEN_RESULTS

ROOT = Path(__file__).resolve().parents[2]

_SHIM = """\
import os
from tests.conformance.broken import BROKEN
factory = BROKEN[os.environ["CATCH_RATE_BACKEND"]][0]
"""


def _run_once(name: str, suite: Path | None, shim_dir: Path) -> set[str]:
    """The properties one whole-suite run failed on backend `name`."""
    with tempfile.TemporaryDirectory() as out:
        report = Path(out, "report.json")
        command = [sys.executable, "-m", "taskrunner_conformance", "catch_rate_shim:factory"]
        paths = [str(shim_dir), str(ROOT)]
        if suite is not None:
            paths.insert(0, str(suite))
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(paths),
            "CATCH_RATE_BACKEND": name,
            "TASKRUNNER_CONFORMANCE_SHRINK": "0",
            "TASKRUNNER_CONFORMANCE_EFFORT": "0.3",
        }
        subprocess.run(
            [*command, "-q", "--json", str(report)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            check=False,
            timeout=900,
        )
        data = json.loads(report.read_text())
    return {pid for pid, p in data["properties"].items() if p["outcome"] == "failed"}


def classify(runs: Sequence[set[str]], named: str | None) -> str:
    """caught / by chance / missed, as the module docstring defines them."""
    if all(run - {"P40"} for run in runs) and (named is None or all(named in r for r in runs)):
        return "caught"
    return "missed" if not any(runs) else "by chance"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure both suites and print the comparison."""
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.catch_rate")
    parser.add_argument("--ref", default="71c9a14", help="the earlier suite's git revision")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument(
        "--only", metavar="NAME,...", help="backends to measure (results: broken_results.py)"
    )
    options = parser.parse_args(argv)
    names = sorted(BROKEN)
    if options.only:
        wanted = {n.strip() for n in options.only.split(",") if n.strip()}
        if "results" in wanted:
            wanted = (wanted - {"results"}) | set(BROKEN_RESULTS)
        unknown = wanted - set(BROKEN)
        if unknown:
            parser.error(f"no broken backend named {', '.join(sorted(unknown))}")
        names = sorted(wanted)
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        (work_dir / "catch_rate_shim.py").write_text(_SHIM)
        old = work_dir / "old"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(old), options.ref],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            suites = {"before": old / "conformance", "after": None}
            jobs = [
                (label, name, run)
                for label in suites
                for name in names
                for run in range(options.runs)
            ]
            with ThreadPoolExecutor(options.jobs) as pool:
                results = list(pool.map(lambda j: _run_once(j[1], suites[j[0]], work_dir), jobs))
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False
            )
    failed: dict[tuple[str, str], list[set[str]]] = {}
    for (label, name, _), result in zip(jobs, results, strict=True):
        failed.setdefault((label, name), []).append(result)
    verdicts: dict[str, dict[str, str]] = {"before": {}, "after": {}}
    for name in names:
        defect = BROKEN[name][1]
        verdicts["before"][name] = classify(failed["before", name], None)
        verdicts["after"][name] = classify(failed["after", name], defect)
        sys.stdout.write(
            f"{name:<48} {defect:<5} before: {verdicts['before'][name]:<9} "
            f"after: {verdicts['after'][name]}\n"
        )
    for label in ("before", "after"):
        counts = {
            k: list(verdicts[label].values()).count(k) for k in ("caught", "by chance", "missed")
        }
        sys.stdout.write(f"{label}: {counts} of {len(names)} defect classes\n")
    if options.json:
        Path(options.json).write_text(json.dumps(verdicts, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
