"""Classify mutation results against the checked-in annotations and write the markdown report.

Input: the mutants of each target as `Mutant` records (tests/mutation/mutants.py reads
them from mutmut). A mutant the suite did not kill is *explained* when an entry of
tests/mutation/equivalent.toml matches it:

``[[mutant]]``
    One mutant, keyed by target, function, and the changed lines before and after
    (stripped), plus ``occurrence`` when the same change appears more than once in the
    function, and ``file`` (the module, relative to the repository root) when the
    target mutates more than one. The key survives line moves and mutmut's renumbering. ``kind`` is
    ``equivalent`` (no difference a caller of the Queue API can observe) or
    ``unspecified`` (observable, but the contract allows both behaviours); any other
    kind is ``gap``: a known missing suite check, still reported as not explained but
    grouped under the contract ``sentence`` it names.
``[[rule]]``
    A named predicate from `RULES` applied to every survivor of a target, for whole
    families such as the letter case of SQL keywords.
``[[function]]``
    A function the suite never reaches because it is not part of the Queue contract
    (URL parsing, test conveniences); explains only that function's unreached mutants.
    ``file`` as for ``[[mutant]]``.

Anything else that was not killed is "SURVIVED (not explained)", and the session fails.
"""

from __future__ import annotations

import posixpath
import re
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "KINDS",
    "RULES",
    "Annotations",
    "Classified",
    "Mutant",
    "TargetRun",
    "classify",
    "load_annotations",
    "render",
]

# Statuses a mutant can end with (normalised from mutmut's by tests/mutation/mutants.py).
DETECTED = frozenset({"killed", "timeout", "crashed"})
# Explanation kinds that count as explained; "gap" entries only group the unexplained.
KINDS = ("equivalent", "unspecified", "outside")


@dataclass(frozen=True, kw_only=True)
class Mutant:
    """One mutant and its outcome.

    Attributes:
        name: mutmut's name for it (changes when the function changes).
        file: The mutated file it is in, relative to the repository root.
        function: ``Class.method`` or ``function``.
        status: ``killed``, ``timeout``, ``crashed``, ``survived``, ``not reached`` (no
            test calls the function), ``not run`` or ``suspicious``.
        line: The first changed line in the original file.
        before: The original lines the mutant changes, stripped.
        after: The lines that replace them, stripped (empty when lines are removed).
        diff: The unified diff of the function, one line of context.
    """

    name: str
    function: str
    status: str
    file: str = ""
    line: int = 0
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    diff: str = ""

    @property
    def detected(self) -> bool:
        """Whether a test failed (or hung, or crashed) on this mutant."""
        return self.status in DETECTED

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Mutant:
        """The inverse of `to_json`."""
        return cls(
            name=str(data["name"]),
            file=str(data.get("file", "")),
            function=str(data["function"]),
            status=str(data["status"]),
            line=int(data.get("line", 0)),
            before=tuple(data.get("before", ())),
            after=tuple(data.get("after", ())),
            diff=str(data.get("diff", "")),
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "name": self.name,
            "file": self.file,
            "function": self.function,
            "status": self.status,
            "line": self.line,
            "before": list(self.before),
            "after": list(self.after),
            "diff": self.diff,
        }


@dataclass(frozen=True, kw_only=True)
class TargetRun:
    """The results of one target's last run.

    Attributes:
        target: The target's name.
        mutated: The mutated files, in the order of `mutants`.
        command: The test command, as described in the report.
        mutants: Every mutant, in mutmut's order.
        seconds: Wall-clock time of the mutmut run.
        jobs: Parallel mutant runs used.
        tool: The mutation tool and version.
        finished_at: When the run ended (ISO 8601, UTC).
    """

    target: str
    mutated: tuple[str, ...]
    command: str
    mutants: tuple[Mutant, ...]
    seconds: float
    jobs: int
    tool: str
    finished_at: str


# -- annotations -------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MutantNote:
    """A ``[[mutant]]`` entry."""

    target: str
    function: str
    before: tuple[str, ...]
    after: tuple[str, ...]
    occurrence: int
    kind: str
    reason: str
    sentence: str = ""
    file: str = ""  # "" when the target mutates one file


@dataclass(frozen=True, kw_only=True)
class RuleNote:
    """A ``[[rule]]`` entry."""

    target: str
    rule: str
    kind: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class FunctionNote:
    """A ``[[function]]`` entry."""

    target: str
    function: str
    reason: str
    file: str = ""  # "" when the target mutates one file


@dataclass(frozen=True, kw_only=True)
class Annotations:
    """Every entry of the annotations file."""

    mutants: tuple[MutantNote, ...] = ()
    rules: tuple[RuleNote, ...] = ()
    functions: tuple[FunctionNote, ...] = ()


def _lines(value: object, where: str) -> tuple[str, ...]:
    """A ``before``/``after`` value: one string (lines joined by newlines) or a list."""
    if isinstance(value, str):
        return tuple(line.strip() for line in value.splitlines() if line.strip())
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return tuple(line.strip() for line in value)
    raise ValueError(f"{where}: expected a string or a list of strings, got {value!r}")


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {key!r} must be a non-empty string")
    return value.strip()


def _file(entry: Mapping[str, Any], where: str) -> str:
    """The optional ``file`` of an entry ("" when absent)."""
    if "file" not in entry:
        return ""
    return _text(entry, "file", where)


def load_annotations(path: Path) -> Annotations:
    """Read and check the annotations file.

    Raises:
        ValueError: An entry lacks a field, names an unknown kind or rule, or has
            fields this reader does not know (a typo would otherwise be ignored).
    """
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    unknown_tables = set(data) - {"mutant", "rule", "function"}
    if unknown_tables:
        raise ValueError(f"{path}: unknown tables {sorted(unknown_tables)}")
    allowed = {
        "mutant": {"target", "function", "before", "after", "occurrence", "kind", "reason"}
        | {"sentence", "file"},
        "rule": {"target", "rule", "kind", "reason"},
        "function": {"target", "function", "reason", "file"},
    }
    for table, entries in data.items():
        for index, entry in enumerate(entries):
            extra = set(entry) - allowed[table]
            if extra:
                raise ValueError(f"{path}: [[{table}]] #{index + 1}: unknown keys {sorted(extra)}")

    mutants = []
    for index, entry in enumerate(data.get("mutant", [])):
        where = f"{path}: [[mutant]] #{index + 1}"
        kind = _text(entry, "kind", where)
        if kind not in ("equivalent", "unspecified", "gap"):
            raise ValueError(f"{where}: kind must be equivalent, unspecified or gap, not {kind!r}")
        occurrence = entry.get("occurrence", 1)
        if not isinstance(occurrence, int) or occurrence < 1:
            raise ValueError(f"{where}: occurrence must be a positive integer")
        if kind == "gap" and not entry.get("sentence"):
            raise ValueError(f"{where}: a gap names the contract sentence it lacks a check for")
        mutants.append(
            MutantNote(
                target=_text(entry, "target", where),
                function=_text(entry, "function", where),
                before=_lines(entry.get("before", ""), f"{where} before"),
                after=_lines(entry.get("after", ""), f"{where} after"),
                occurrence=occurrence,
                kind=kind,
                reason=_text(entry, "reason", where),
                sentence=str(entry.get("sentence", "")).strip(),
                file=_file(entry, where),
            )
        )
    rules = []
    for index, entry in enumerate(data.get("rule", [])):
        where = f"{path}: [[rule]] #{index + 1}"
        name = _text(entry, "rule", where)
        if name not in RULES:
            raise ValueError(f"{where}: unknown rule {name!r}; known: {', '.join(RULES)}")
        kind = _text(entry, "kind", where)
        if kind not in ("equivalent", "unspecified"):
            raise ValueError(f"{where}: kind must be equivalent or unspecified, not {kind!r}")
        rules.append(
            RuleNote(
                target=_text(entry, "target", where),
                rule=name,
                kind=kind,
                reason=_text(entry, "reason", where),
            )
        )
    functions = []
    for index, entry in enumerate(data.get("function", [])):
        where = f"{path}: [[function]] #{index + 1}"
        functions.append(
            FunctionNote(
                target=_text(entry, "target", where),
                function=_text(entry, "function", where),
                reason=_text(entry, "reason", where),
                file=_file(entry, where),
            )
        )
    return Annotations(mutants=tuple(mutants), rules=tuple(rules), functions=tuple(functions))


# -- rules -------------------------------------------------------------------------

_SQL_KEYWORD = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|FROM|INTO|WHERE|AND|OR|VALUES|ORDER BY|GROUP BY|LIMIT|"
    r"PRAGMA|BEGIN|COMMIT|ROLLBACK|CREATE|SET|CASE|WHEN|THEN|ELSE|END)\b",
    re.IGNORECASE,
)
_SQL_VALUE = re.compile(r"'[^']*'")
_RAISE = re.compile(r"^raise (?P<type>[\w.]+)\((?P<args>.*)\)(?P<cause> from \w+)?$")


def sql_letter_case(before: Sequence[str], after: Sequence[str]) -> bool:
    """Only the letter case of SQL text changed, and no quoted SQL value with it.

    SQL keywords and SQLite table and column names are case-insensitive; string values
    such as ``'ready'`` are not, so a change to one of those never matches.
    """
    if len(before) != len(after) or before == after:
        return False
    for old, new in zip(before, after, strict=True):
        if old == new:
            continue
        if old.lower() != new.lower() or old.startswith("raise "):
            return False
        if not _SQL_KEYWORD.search(old):
            return False
        if _SQL_VALUE.findall(old) != _SQL_VALUE.findall(new):
            return False
    return True


def exception_message(before: Sequence[str], after: Sequence[str]) -> bool:
    """Only the arguments (the message) of a raised exception changed, not its type."""
    if len(before) != 1 or len(after) != 1:
        return False
    old, new = _RAISE.match(before[0]), _RAISE.match(after[0])
    return (
        old is not None
        and new is not None
        and old["type"] == new["type"]
        and old["cause"] == new["cause"]
        and old["args"] != new["args"]
    )


_CHECK_CALL = re.compile(
    r"^(?P<head>(?:[\w.]+ = |return )?)"
    r"(?P<call>_?check_(?:seconds|count|instant|text|names))"
    r'\((?P<label>"[^"]*"|None), (?P<rest>.*)$'
)


def check_label(before: Sequence[str], after: Sequence[str]) -> bool:
    """Only the label of an argument check changed: the name its error message shows.

    ``check_seconds("wait_seconds", value)``, ``check_count``, ``check_instant``,
    ``check_text`` and ``check_names`` (src/taskrunner_backends/checks.py; the SQLite
    example's ``_check_seconds`` and ``_check_count`` alike) use their first argument
    only to word the exception; the check itself is the same.
    """
    if len(before) != 1 or len(after) != 1:
        return False
    old, new = _CHECK_CALL.match(before[0]), _CHECK_CALL.match(after[0])
    return (
        old is not None
        and new is not None
        and old["head"] == new["head"]
        and old["call"] == new["call"]
        and old["rest"] == new["rest"]
        and old["label"] != new["label"]
    )


RULES: dict[str, Callable[[Sequence[str], Sequence[str]], bool]] = {
    "sql-letter-case": sql_letter_case,
    "exception-message": exception_message,
    "check-label": check_label,
}


# -- classification ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What the report says about one mutant the suite did not detect."""

    mutant: Mutant
    occurrence: int
    kind: str = ""  # one of KINDS when explained, "" when not
    reason: str = ""
    sentence: str = ""  # the contract sentence of a known gap

    @property
    def explained(self) -> bool:
        return bool(self.kind)


@dataclass(frozen=True, kw_only=True)
class Classified:
    """One target's mutants sorted into what the report shows."""

    run: TargetRun
    detected: tuple[Mutant, ...]
    verdicts: tuple[Verdict, ...]
    stale: tuple[str, ...] = field(default=())

    @property
    def unexplained(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if not v.explained)

    def count(self, status: str) -> int:
        return sum(m.status == status for m in self.run.mutants)

    def count_kind(self, kind: str) -> int:
        return sum(v.kind == kind for v in self.verdicts)


def _occurrences(mutants: Iterable[Mutant], run: TargetRun) -> dict[str, int]:
    """Number each mutant among those of its function making the same change."""
    seen: Counter[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = Counter()
    numbers = {}
    for mutant in mutants:
        key = (file_of(mutant, run), mutant.function, mutant.before, mutant.after)
        seen[key] += 1
        numbers[mutant.name] = seen[key]
    return numbers


def file_of(mutant: Mutant, run: TargetRun) -> str:
    """The file `mutant` is in (results of a one-file run may not name it)."""
    return mutant.file or run.mutated[0]


def _note_file(note: MutantNote | FunctionNote, run: TargetRun) -> str:
    """The mutated file `note` is about.

    Raises:
        ValueError: The note names no file and the target mutates several, or names
            one the target does not mutate (a typo would otherwise match nothing).
    """
    where = f"[[{'mutant' if isinstance(note, MutantNote) else 'function'}]] {note.function}"
    if not note.file:
        if len(run.mutated) > 1:
            raise ValueError(
                f"{where}: target {run.target} mutates {len(run.mutated)} files; "
                "name the one it is about with file = ..."
            )
        return run.mutated[0]
    if note.file not in run.mutated:
        raise ValueError(
            f"{where}: file {note.file!r} is not mutated by target {run.target} "
            f"({', '.join(run.mutated)})"
        )
    return note.file


def _label(file: str, function: str, run: TargetRun) -> str:
    """`function`, preceded by its file when the target mutates several."""
    return f"{short_file(file, run)} {function}" if len(run.mutated) > 1 else function


def short_file(file: str, run: TargetRun) -> str:
    """`file` relative to the directory of all the target's files (the package)."""
    if len(run.mutated) == 1:
        return file
    common = posixpath.commonpath(run.mutated)
    return posixpath.relpath(file, common)


def classify(run: TargetRun, annotations: Annotations) -> Classified:
    """Match the target's undetected mutants against the annotations.

    Raises:
        ValueError: An annotation of the target names no file or a wrong one
            (`_note_file`).
    """
    occurrence = _occurrences(run.mutants, run)
    notes = {
        (_note_file(n, run), n.function, n.before, n.after, n.occurrence): n
        for n in annotations.mutants
        if n.target == run.target
    }
    rules = [r for r in annotations.rules if r.target == run.target]
    outside = {
        (_note_file(f, run), f.function): f for f in annotations.functions if f.target == run.target
    }
    used: set[object] = set()
    verdicts = []
    for mutant in run.mutants:
        if mutant.detected:
            continue
        number = occurrence[mutant.name]
        file = file_of(mutant, run)
        verdict = Verdict(mutant=mutant, occurrence=number)
        note = notes.get((file, mutant.function, mutant.before, mutant.after, number))
        rule = next((r for r in rules if RULES[r.rule](mutant.before, mutant.after)), None)
        function = outside.get((file, mutant.function))
        if mutant.status == "not reached" and function is not None:
            verdict = Verdict(
                mutant=mutant, occurrence=number, kind="outside", reason=function.reason
            )
            used.add(function)
        elif mutant.status == "survived" and note is not None and note.kind != "gap":
            verdict = Verdict(mutant=mutant, occurrence=number, kind=note.kind, reason=note.reason)
            used.add(note)
        elif mutant.status == "survived" and rule is not None:
            verdict = Verdict(mutant=mutant, occurrence=number, kind=rule.kind, reason=rule.reason)
            used.add(rule)
        elif note is not None:
            verdict = Verdict(
                mutant=mutant, occurrence=number, reason=note.reason, sentence=note.sentence
            )
            used.add(note)
        verdicts.append(verdict)
    stale = [
        f"[[mutant]] {_label(file, n.function, run)}: "
        f"{' / '.join(n.before)} => {' / '.join(n.after)}"
        for (file, *_), n in notes.items()
        if n not in used
    ]
    stale += [f"[[rule]] {r.rule}" for r in rules if r not in used]
    stale += [
        f"[[function]] {_label(file, f.function, run)}"
        for (file, _), f in outside.items()
        if f not in used
    ]
    return Classified(
        run=run,
        detected=tuple(m for m in run.mutants if m.detected),
        verdicts=tuple(verdicts),
        stale=tuple(stale),
    )


# -- score -----------------------------------------------------------------------------


def score(results: Sequence[Classified], *, suite_version: str) -> dict[str, Any]:
    """The mutation score the conformance report prints, per target.

    ``scored`` leaves out the mutants the suite must not or cannot detect (equivalent,
    unspecified, outside the contract); ``killed`` counts timeouts too (detected).
    """
    targets = {}
    for c in results:
        excluded = sum(c.count_kind(kind) for kind in ("equivalent", "unspecified", "outside"))
        killed = c.count("killed") + c.count("timeout")
        targets[c.run.target] = {
            "mutated": list(c.run.mutated),
            "mutants": len(c.run.mutants),
            "scored": len(c.run.mutants) - excluded,
            "killed": killed,
            "unexplained": len(c.unexplained),
            "finished_at": c.run.finished_at,
        }
    return {"suite_version": suite_version, "targets": targets}


# -- markdown ------------------------------------------------------------------------


def _code(text: str) -> str:
    """Inline code that survives backticks in the text."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _change(mutant: Mutant) -> str:
    before = " / ".join(mutant.before) or "(nothing)"
    after = " / ".join(mutant.after) or "(removed)"
    return f"{_code(before)} → {_code(after)}"


def _toml_string(text: str) -> str:
    if "'" not in text and "\n" not in text:
        return f"'{text}'"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def annotation_stub(target: str, verdict: Verdict, *, file: str = "") -> str:
    """A ``[[mutant]]`` entry to paste into the annotations file for `verdict`.

    `file` is the mutant's file, given when the target mutates several.
    """
    mutant = verdict.mutant

    def lines(values: tuple[str, ...]) -> str:
        if len(values) == 1:
            return _toml_string(values[0])
        return "[" + ", ".join(_toml_string(v) for v in values) + "]"

    entry = [
        "[[mutant]]",
        f'target = "{target}"',
        *([f'file = "{file}"'] if file else []),
        f'function = "{mutant.function}"',
        f"before = {lines(mutant.before)}",
        f"after = {lines(mutant.after)}",
    ]
    if verdict.occurrence > 1:
        entry.append(f"occurrence = {verdict.occurrence}")
    entry += ['kind = "equivalent"', 'reason = ""']
    return "\n".join(entry)


def _files(run: TargetRun) -> str:
    """The target's files: the one, or their directory and how many."""
    if len(run.mutated) == 1:
        return run.mutated[0]
    return f"{posixpath.commonpath(run.mutated)}/, {len(run.mutated)} files"


def _at(mutant: Mutant, run: TargetRun) -> str:
    """Where `mutant` is: its line, and its file when the target mutates several."""
    if len(run.mutated) == 1:
        return f"line {mutant.line}"
    return f"{short_file(file_of(mutant, run), run)} line {mutant.line}"


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"


_LEGEND = """\
mutmut changes one small thing at a time in a backend (an operator, a constant, a
removed argument, a `continue` turned into `break`...) and runs the conformance suite
against each such *mutant* (stopping at the first failure). A verdict must not depend
on chance, so the randomised model-based test (P40) is left out: a mutant only it would
kill counts as a survivor. A mutant is

* **killed** when a test fails, **timeout** when the tests hang on it (both detected);
* **equivalent** when no caller of the Queue API can tell it from the original, and
  **unspecified** when a caller can, but the contract allows both behaviours; each has a
  one-line reason in tests/mutation/equivalent.toml;
* **outside** when the suite never calls the function because it is not part of the
  Queue contract (URL parsing, test conveniences);
* **SURVIVED (not explained)** otherwise: a missing suite check, or an annotation to
  write. `nox -s mutation` fails while one exists.

Annotations are keyed by target, function and the changed lines, so they survive line
moves and mutmut's renumbering; each unexplained survivor below shows the entry to add.
"""


def render(results: Sequence[Classified], *, suite_version: str = "") -> str:
    """The whole markdown report; `suite_version` is the conformance suite's it measures."""
    out = [
        "# Mutation testing of the conformance suite",
        "",
        "Written by `nox -s mutation` (tests/mutation/run.py); do not edit by hand. Explain a",
        "survivor in tests/mutation/equivalent.toml, or kill it with a suite test, and",
        "run the session again.",
        "",
        *(
            [
                f"Measured at conformance suite {suite_version} (the score the suite's "
                "report prints is the same run's, in",
                "conformance/taskrunner_conformance/mutation_score.json).",
                "",
            ]
            if suite_version
            else []
        ),
        _LEGEND,
        "## Summary",
        "",
        "| target | mutants | killed | timeout | equivalent | unspecified | outside "
        "| not explained | run time |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in results:
        run = c.run
        out.append(
            f"| {run.target} ({_files(run)}) | {len(run.mutants)} | {c.count('killed')} "
            f"| {c.count('timeout')} | {c.count_kind('equivalent')} "
            f"| {c.count_kind('unspecified')} | {c.count_kind('outside')} "
            f"| **{len(c.unexplained)}** | {_minutes(run.seconds)} ({run.jobs} jobs) |"
        )
    out.append("")
    for c in results:
        out += _target_section(c)
    return "\n".join(out).rstrip() + "\n"


def _diff_block(mutant: Mutant) -> list[str]:
    return ["```diff", mutant.diff.rstrip(), "```"]


def _target_section(c: Classified) -> list[str]:
    run = c.run
    other = Counter(
        m.status for m in run.mutants if m.status not in ("killed", "timeout", "survived")
    )
    out = [
        f"## {run.target}: {_files(run)}",
        "",
        *(
            [f"Mutated files: {', '.join(short_file(f, run) for f in run.mutated)}.", ""]
            if len(run.mutated) > 1
            else []
        ),
        f"Test command: {run.command}.",
        f"{run.tool}; {len(run.mutants)} mutants in {_minutes(run.seconds)} with "
        f"{run.jobs} parallel jobs (finished {run.finished_at}).",
    ]
    if other:
        out.append(
            "Other outcomes: " + ", ".join(f"{n} {status}" for status, n in sorted(other.items()))
        )
    out.append("")

    unexplained = c.unexplained
    out += [f"### Survived, not explained ({len(unexplained)})", ""]
    if not unexplained:
        out += ["None.", ""]
    by_sentence: dict[str, list[Verdict]] = defaultdict(list)
    for verdict in unexplained:
        by_sentence[verdict.sentence].append(verdict)
    for sentence in sorted(by_sentence, key=lambda s: (s == "", s)):
        verdicts = by_sentence[sentence]
        if sentence:
            out += [f"#### Known gap: {sentence}", ""]
        elif len(by_sentence) > 1:
            out += ["#### Not yet classified", ""]
        for verdict in verdicts:
            mutant = verdict.mutant
            status = "SURVIVED (not explained)"
            if mutant.status != "survived":
                status += f"; status: {mutant.status}"
            out += [
                f"**{mutant.function}**, {_at(mutant, run)}: {status}"
                + (f": {verdict.reason}" if verdict.reason else ""),
                "",
                *_diff_block(mutant),
                "",
            ]
            if not verdict.sentence:
                out += [
                    "<details><summary>annotation</summary>",
                    "",
                    "```toml",
                    annotation_stub(
                        run.target,
                        verdict,
                        file=file_of(mutant, run) if len(run.mutated) > 1 else "",
                    ),
                    "```",
                    "",
                    "</details>",
                    "",
                ]

    explained = [v for v in c.verdicts if v.kind in ("equivalent", "unspecified")]
    out += [f"### Equivalent and unspecified ({len(explained)})", ""]
    files = {file: index for index, file in enumerate(run.mutated)}
    for verdict in sorted(
        explained,
        key=lambda v: (files.get(file_of(v.mutant, run), 0), v.mutant.line, v.mutant.name),
    ):
        mutant = verdict.mutant
        label = "equivalent" if verdict.kind == "equivalent" else "unspecified by the contract"
        out += [
            f"- {_at(mutant, run)}, **{mutant.function}**: {_change(mutant)}: "
            f"{label}: {verdict.reason}",
        ]
    out.append("")

    timeouts = [m for m in c.detected if m.status == "timeout"]
    if timeouts:
        out += [f"### Timeouts ({len(timeouts)}: detected, the tests hang)", ""]
        for mutant in timeouts:
            out.append(f"- {_at(mutant, run)}, **{mutant.function}**: {_change(mutant)}")
        out.append("")

    outside: dict[tuple[str, str], list[Verdict]] = defaultdict(list)
    for verdict in c.verdicts:
        if verdict.kind == "outside":
            outside[file_of(verdict.mutant, run), verdict.mutant.function].append(verdict)
    if outside:
        out += [f"### Outside the contract ({c.count_kind('outside')})", ""]
        for (file, function), verdicts in outside.items():
            lines = sorted({v.mutant.line for v in verdicts})
            where = f"{short_file(file, run)} " if len(run.mutated) > 1 else ""
            out += [
                f"<details><summary><b>{function}</b> ({where}lines {lines[0]}-{lines[-1]}, "
                f"{len(verdicts)} mutants): {verdicts[0].reason}</summary>",
                "",
                *[f"- line {v.mutant.line}: {_change(v.mutant)}" for v in verdicts],
                "",
                "</details>",
                "",
            ]

    if c.stale:
        out += [
            "### Annotations that matched nothing",
            "",
            "The code they describe changed or is now killed; remove or update them.",
            "",
            *[f"- {_code(entry)}" for entry in c.stale],
            "",
        ]
    return out
