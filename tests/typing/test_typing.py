"""The typing cases (cases_*.py) give exactly the errors their comments expect.

One mypy run on copies with the ``# type: ignore[code]`` comments stripped: the
reported (line, code) pairs must equal the commented ones, and nothing else may be
reported (an `assert_type` mismatch is an error on a line without a comment). pyright,
when installed, must report errors on exactly the same lines. About
About 2.5 s on this machine, cold cache (mypy reads taskrunner and msgspec).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CASES = sorted(HERE.glob("cases_*.py"))
IGNORE = re.compile(r"\s*# type: ignore\[([a-z-]+)\]$")
REPORTED = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")


def expected(path: Path) -> tuple[str, set[tuple[int, str]]]:
    stripped: list[str] = []
    marks: set[tuple[int, str]] = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        found = IGNORE.search(line)
        if found:
            marks.add((number, found.group(1)))
            line = line[: found.start()]
        stripped.append(line)
    return "\n".join(stripped) + "\n", marks


def test_there_are_cases_with_expected_errors() -> None:
    assert CASES
    assert all(expected(case)[1] for case in CASES)


def test_mypy_reports_exactly_the_expected_errors(tmp_path: Path) -> None:
    want: dict[str, set[tuple[int, str]]] = {}
    for case in CASES:
        text, marks = expected(case)
        (tmp_path / case.name).write_text(text)
        want[case.name] = marks
    stdout, stderr, _ = mypy_api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            # Its own cache: the project's may be written by a concurrent mypy run.
            str(tmp_path / "cache"),
            "--no-error-summary",
            "--hide-error-context",
            "--no-pretty",
            *(str(tmp_path / case.name) for case in CASES),
        ]
    )
    assert not stderr
    got: dict[str, set[tuple[int, str]]] = {name: set() for name in want}
    for line in stdout.splitlines():
        match = REPORTED.match(line)
        if match:
            got[Path(match["file"]).name].add((int(match["line"]), match["code"]))
        else:
            assert ": note: " in line, f"unexpected mypy output: {line}"
    assert got == want


@pytest.mark.skipif(shutil.which("pyright") is None, reason="pyright is not installed")
def test_pyright_reports_errors_on_exactly_the_expected_lines(tmp_path: Path) -> None:
    """pyright's rule names differ from mypy's codes: only the lines are compared."""
    want: set[tuple[str, int]] = set()
    for case in CASES:
        text, marks = expected(case)
        (tmp_path / case.name).write_text(text)
        want |= {(case.name, line) for line, _ in marks}
    done = subprocess.run(
        ["pyright", "--pythonpath", sys.executable, "--outputjson", *(c.name for c in CASES)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stdout)
    got = {
        (Path(d["file"]).name, d["range"]["start"]["line"] + 1)
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    }
    assert got == want
