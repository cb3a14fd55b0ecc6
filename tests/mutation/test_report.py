"""The mutation report's classification: what explains a survivor, and what does not.

These run in the regular test session (no mutmut needed); the mutation run itself is
``nox -s mutation``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .report import (
    Annotations,
    Mutant,
    TargetRun,
    annotation_stub,
    check_label,
    classify,
    exception_message,
    load_annotations,
    render,
    sql_letter_case,
)
from .run import ANNOTATIONS, ROOT
from .targets import TARGETS

PACKAGE = ("src/pkg/queue.py", "src/pkg/url.py")


def run_of(
    *mutants: Mutant, target: str = "memory", files: tuple[str, ...] = ("src/example.py",)
) -> TargetRun:
    return TargetRun(
        target=target,
        mutated=files,
        command="pytest",
        mutants=mutants,
        seconds=12.0,
        jobs=2,
        tool="mutmut 0",
        finished_at="2026-01-01 00:00 UTC",
    )


def survivor(
    name: str = "m.x_f__mutmut_1",
    *,
    function: str = "Queue.release",
    before: str = "continue",
    after: str = "break",
    line: int = 10,
    status: str = "survived",
    file: str = "",
) -> Mutant:
    return Mutant(
        name=name,
        file=file,
        function=function,
        status=status,
        line=line,
        before=(before,),
        after=(after,),
        diff=f"-{before}\n+{after}",
    )


def notes_from(tmp_path: Path, text: str) -> Annotations:
    path = tmp_path / "equivalent.toml"
    path.write_text(text, encoding="utf-8")
    return load_annotations(path)


NOTE = """
[[mutant]]
target = "memory"
function = "Queue.release"
before = 'continue'
after = 'break'
kind = "equivalent"
reason = "the loop ends there anyway"
"""


def test_the_checked_in_annotations_load() -> None:
    loaded = load_annotations(ANNOTATIONS)

    assert loaded.mutants
    assert {note.kind for note in loaded.mutants} <= {"equivalent", "unspecified", "gap"}


def test_the_checked_in_annotations_name_files_their_targets_mutate() -> None:
    loaded = load_annotations(ANNOTATIONS)

    for target in TARGETS.values():
        # classify checks every annotation of the target against its files.
        classify(run_of(target=target.name, files=target.mutated), loaded)


def test_the_memory_target_mutates_every_module_of_the_package() -> None:
    package = ROOT / "src" / "taskrunner_backends" / "memory"

    assert set(TARGETS["memory"].mutated) == {
        path.relative_to(ROOT).as_posix() for path in package.glob("*.py")
    }
    assert "src/taskrunner_backends/memory/queue.py" in TARGETS["memory"].mutated
    assert TARGETS["sqlite"].mutated == ("examples/sqlite_backend/queue.py",)


FILE_NOTE = NOTE.replace(
    'function = "Queue.release"', 'file = "src/pkg/queue.py"\nfunction = "Queue.release"'
)


def test_in_a_target_of_several_files_a_note_explains_only_the_mutant_in_its_file(
    tmp_path: Path,
) -> None:
    notes = notes_from(tmp_path, FILE_NOTE)
    same = survivor("pkg.queue.a", file="src/pkg/queue.py")
    other = survivor("pkg.url.b", file="src/pkg/url.py")

    result = classify(run_of(same, other, files=PACKAGE), notes)

    assert [v.explained for v in result.verdicts] == [True, False]
    assert result.stale == ()


def test_identical_changes_in_two_files_are_numbered_apart() -> None:
    first = survivor("pkg.queue.a", file="src/pkg/queue.py")
    second = survivor("pkg.url.b", file="src/pkg/url.py")

    verdicts = classify(run_of(first, second, files=PACKAGE), Annotations()).verdicts

    assert [v.occurrence for v in verdicts] == [1, 1]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (NOTE, "name the one it is about"),
        (FILE_NOTE.replace("src/pkg/queue.py", "src/pkg/qeueu.py"), "is not mutated by"),
        (
            '[[function]]\ntarget = "memory"\nfunction = "f"\nreason = "URL parsing"\n',
            "name the one it is about",
        ),
    ],
)
def test_in_a_target_of_several_files_a_note_must_name_one_of_them(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        classify(run_of(files=PACKAGE), notes_from(tmp_path, text))


def test_a_note_for_one_file_of_several_that_matched_nothing_is_stale_with_its_file(
    tmp_path: Path,
) -> None:
    result = classify(run_of(files=PACKAGE), notes_from(tmp_path, FILE_NOTE))

    assert result.stale == ("[[mutant]] queue.py Queue.release: continue => break",)


def test_report_of_several_files_names_each_mutant_s_file_and_its_stub_the_file(
    tmp_path: Path,
) -> None:
    mutant = survivor("pkg.url.a", file="src/pkg/url.py", line=42)
    result = classify(run_of(mutant, files=PACKAGE), Annotations())
    (verdict,) = result.unexplained

    text = render([result])
    stub = annotation_stub("memory", verdict, file="src/pkg/url.py")

    assert "| memory (src/pkg/, 2 files) |" in text
    assert "Measured at conformance suite 9.9 " in render([result], suite_version="9.9")
    assert "Mutated files: queue.py, url.py." in text
    assert "**Queue.release**, url.py line 42: SURVIVED (not explained)" in text
    assert stub in text
    assert 'file = "src/pkg/url.py"' in stub
    filled = stub.replace('reason = ""', 'reason = "why"')
    (again,) = classify(run_of(mutant, files=PACKAGE), notes_from(tmp_path, filled)).verdicts
    assert again.explained


def test_results_of_a_one_file_run_name_no_file_and_still_match_its_notes(
    tmp_path: Path,
) -> None:
    old = Mutant.from_json(
        {
            "name": "m",
            "function": "Queue.release",
            "status": "survived",
            "before": ["continue"],
            "after": ["break"],
        }
    )

    (verdict,) = classify(run_of(old), notes_from(tmp_path, NOTE)).verdicts

    assert verdict.explained


def test_note_explains_the_mutant_wherever_it_moved_and_however_mutmut_numbers_it(
    tmp_path: Path,
) -> None:
    notes = notes_from(tmp_path, NOTE)
    moved = survivor("m.x_f__mutmut_7", line=250)

    (verdict,) = classify(run_of(moved), notes).verdicts

    assert verdict.explained
    assert (verdict.kind, verdict.reason) == ("equivalent", "the loop ends there anyway")


def test_note_for_another_function_target_or_change_explains_nothing(tmp_path: Path) -> None:
    notes = notes_from(tmp_path, NOTE)
    others = (
        survivor("a", function="Queue.dead_letter"),
        survivor("b", after="pass"),
        survivor("c"),
    )

    memory = classify(run_of(*others[:2]), notes)
    sqlite = classify(run_of(others[2], target="sqlite"), notes)

    assert [v.explained for v in memory.verdicts + sqlite.verdicts] == [False, False, False]
    assert memory.stale, "an annotation that matched nothing must be reported"


def test_occurrence_tells_identical_changes_in_one_function_apart(tmp_path: Path) -> None:
    notes = notes_from(
        tmp_path, NOTE.replace('kind = "equivalent"', 'occurrence = 2\nkind = "equivalent"')
    )

    first, second = classify(run_of(survivor("a"), survivor("b")), notes).verdicts

    assert (first.explained, second.explained) == (False, True)
    assert (first.occurrence, second.occurrence) == (1, 2)


def test_killed_mutant_needs_no_note_and_leaves_its_note_stale(tmp_path: Path) -> None:
    notes = notes_from(tmp_path, NOTE)

    result = classify(run_of(survivor(status="killed")), notes)

    assert result.verdicts == ()
    assert len(result.detected) == 1
    assert result.stale == ("[[mutant]] Queue.release: continue => break",)


def test_gap_note_groups_the_survivor_but_leaves_it_unexplained(tmp_path: Path) -> None:
    gap = NOTE.replace('kind = "equivalent"', 'kind = "gap"\nsentence = "release returns the lost"')

    result = classify(run_of(survivor()), notes_from(tmp_path, gap))

    (verdict,) = result.unexplained
    assert verdict.sentence == "release returns the lost"
    assert "#### Known gap: release returns the lost" in render([result])


def test_function_note_explains_only_mutants_the_suite_never_reaches(tmp_path: Path) -> None:
    notes = notes_from(
        tmp_path,
        '[[function]]\ntarget = "memory"\nfunction = "open_from_url"\nreason = "URL parsing"\n',
    )
    unreached = survivor("a", function="open_from_url", status="not reached")
    reached = survivor("b", function="open_from_url")

    verdicts = classify(run_of(unreached, reached), notes).verdicts

    assert [(v.kind, v.explained) for v in verdicts] == [("outside", True), ("", False)]


def test_unexplained_survivor_shows_its_diff_and_a_stub_that_explains_it_once_filled_in(
    tmp_path: Path,
) -> None:
    mutant = survivor(before="if a == 'x':", after='if a != "x":', line=42)
    result = classify(run_of(mutant), Annotations())
    (verdict,) = result.unexplained

    text = render([result])
    stub = annotation_stub("memory", verdict)

    assert "**Queue.release**, line 42: SURVIVED (not explained)" in text
    assert "-if a == 'x':\n+if a != \"x\":" in text
    assert stub in text
    filled = stub.replace('reason = ""', 'reason = "why"')
    (again,) = classify(run_of(mutant), notes_from(tmp_path, filled)).verdicts
    assert again.explained


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            '"SELECT count(*) FROM messages WHERE queue = ?",',
            '"select count(*) from messages where queue = ?",',
        ),
        (
            "\"state = 'ready' AND available_at <= ?\",",
            "\"state = 'ready' and available_at <= ?\",",
        ),
        ('self._db.execute("BEGIN IMMEDIATE")', 'self._db.execute("begin immediate")'),
    ],
)
def test_letter_case_of_sql_keywords_and_names_is_equivalent(before: str, after: str) -> None:
    assert sql_letter_case((before,), (after,))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        # A quoted SQL value is case-sensitive.
        (
            "sql = \"UPDATE messages SET state = 'ready' WHERE id = ?\"",
            "sql = \"UPDATE MESSAGES SET STATE = 'READY' WHERE ID = ?\"",
        ),
        # A Python string that is no SQL.
        ('in_flight=counts.get("in_flight", 0)', 'in_flight=counts.get("IN_FLIGHT", 0)'),
        ('raise QueueClosedError("closed or not")', 'raise QueueClosedError("CLOSED OR NOT")'),
        ('sql = "SELECT 1"', 'sql = "SELECT 2"'),
    ],
)
def test_other_changes_are_not_sql_letter_case(before: str, after: str) -> None:
    assert not sql_letter_case((before,), (after,))


def test_exception_message_matches_only_a_changed_message_of_the_same_exception() -> None:
    message = 'raise ValueError(f"bad {x}")'

    assert exception_message((message,), ("raise ValueError(None)",))
    assert exception_message(
        ('raise BackendUnavailableError(f"SQLite: {exc}") from exc',),
        ("raise BackendUnavailableError(None) from exc",),
    )
    assert not exception_message((message,), ("raise TypeError(None)",))
    assert not exception_message((message,), ('raise ValueError(f"bad {x}") from None',))
    assert not exception_message(("x = f(1)",), ("x = f(2)",))


def test_check_label_matches_only_the_label_of_the_same_check() -> None:
    line = '_check_seconds("wait_seconds", wait_seconds)'
    shared = 'instant = check_instant("instant", instant)'
    assert check_label((shared,), ('instant = check_instant("INSTANT", instant)',))
    assert check_label(('check_text("name", name)',), ("check_text(None, name)",))
    assert not check_label((shared,), ('other = check_instant("INSTANT", instant)',))
    assert not check_label((shared,), ('instant = check_seconds("instant", instant)',))
    assert check_label((line,), ("_check_seconds(None, wait_seconds)",))
    assert check_label((line,), ('_check_seconds("XXwait_secondsXX", wait_seconds)',))
    assert not check_label((line,), ('_check_seconds("wait_seconds", lease_seconds)',))
    assert not check_label((line,), ('_check_count("wait_seconds", wait_seconds)',))
    assert not check_label(
        ('_check_seconds("x", v, positive=True)',), ('_check_seconds("x", v, positive=False)',)
    )
    assert not check_label(("x = f(1)",), ("x = f(2)",))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (NOTE.replace('"equivalent"', '"probably"'), "kind must be"),
        (NOTE + "colour = 'red'\n", "unknown keys"),
        (NOTE.replace('kind = "equivalent"', 'kind = "gap"'), "contract sentence"),
        (
            '[[rule]]\ntarget = "x"\nrule = "no-such"\nkind = "equivalent"\nreason = "r"\n',
            "unknown rule",
        ),
        ("[[mutants]]\n", "unknown tables"),
    ],
)
def test_bad_annotations_are_rejected_with_the_problem_named(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        notes_from(tmp_path, text)


def test_plugin_deselects_exactly_the_randomised_model_based_test() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.mutation.plugin",
            "tests/conformance/test_memory_conformance.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )

    assert completed.returncode == 0, completed.stdout + completed.stderr
    collected = [line for line in completed.stdout.splitlines() if "::" in line]
    assert collected
    assert not [line for line in collected if "random_operations" in line]
    # One P40 test in each of the three memory test classes.
    assert "(3 deselected)" in completed.stdout
