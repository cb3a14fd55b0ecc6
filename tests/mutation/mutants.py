"""Read one target's mutants and outcomes out of a finished mutmut run.

The only module that knows mutmut's layout: the ``.meta`` file next to each mutated
file holds the exit code per mutant, and the mutated file holds the original and the
mutated copy of every function. mutmut's own diff is relative to the function; this
module locates the change in the original file and keeps the changed lines, which key
the annotations. Written against the mutmut version pinned in pyproject.toml.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import libcst as cst
from mutmut.mutation.diff_apply import (
    read_functions_from_index,
    read_mutant_function,
    read_mutants_module,
    read_original_function,
)
from mutmut.stats import status_by_exit_code

from .report import Mutant

__all__ = ["read_mutants"]

# mutmut's statuses, normalised to the report's.
_STATUS = {
    "killed": "killed",
    "caught by type check": "killed",
    "survived": "survived",
    "no tests": "not reached",
    "timeout": "timeout",
    "segfault": "crashed",
    "not checked": "not run",
    "check was interrupted by user": "not run",
    "skipped": "not run",
}

_NAME = re.compile(r"^x(?:ǁ(?P<cls>\w+)ǁ|_)(?P<func>\w+?)__mutmut_(?P<number>\d+)$")


def _function_of(name: str) -> tuple[str, int]:
    """``Class.method`` (or ``function``) and the mutant number from a mutmut name."""
    match = _NAME.match(name.rpartition(".")[2])
    if match is None:
        raise ValueError(f"unexpected mutmut mutant name {name!r}")
    qualname = f"{match['cls']}.{match['func']}" if match["cls"] else match["func"]
    return qualname, int(match["number"])


def _end_lines(source: str) -> dict[str, int]:
    """The last line of each top-level function and method, by qualified name."""
    ends = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            ends[node.name] = node.end_lineno or node.lineno
        elif isinstance(node, ast.ClassDef):
            for child in node.body:
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    ends[f"{node.name}.{child.name}"] = child.end_lineno or child.lineno
    return ends


@contextmanager
def _cwd(path: Path) -> Iterator[None]:
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _functions(name: str, path: str) -> tuple[list[str], list[str]]:
    """The original and the mutated function's lines, as mutmut wrote them."""
    functions = read_functions_from_index(name, path)
    if functions is None:
        module = read_mutants_module(path)
        functions = (read_original_function(module, name), read_mutant_function(module, name))
    original, mutated = (cst.Module([f]).code.strip().split("\n") for f in functions)
    return original, mutated


def _change(
    name: str, path: str, source: list[str], function_end: int
) -> tuple[int, tuple[str, ...], tuple[str, ...], str]:
    """First changed line in the file, the changed lines before and after, and the diff."""
    original, mutated = _functions(name, path)
    # mutmut's copy of a method starts at column 0; indent it as in the file.
    last = source[function_end - 1]
    indent = last[: len(last) - len(original[-1])] if last.endswith(original[-1]) else ""
    if indent.strip():
        indent = ""
    original = [indent + o if o else o for o in original]
    mutated = [indent + m if m else m for m in mutated]
    matcher = difflib.SequenceMatcher(a=original, b=mutated, autojunk=False)
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if not changes:
        return 0, (), (), ""
    first_original = changes[0][1]
    # The function's text ends on its last line in the file.
    line = function_end - (len(original) - 1 - first_original)
    before = tuple(o.strip() for _, i1, i2, _, _ in changes for o in original[i1:i2])
    after = tuple(m.strip() for _, _, _, j1, j2 in changes for m in mutated[j1:j2])
    diff = difflib.unified_diff(original, mutated, fromfile=path, tofile=path, n=1, lineterm="")
    # Hunk headers count from the top of the function; relabel them with file lines.
    offset = line - first_original - 1
    relabelled = [_relabel(d, offset) if d.startswith("@@") else d for d in diff]
    return line, before, after, "\n".join(relabelled)


_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def _relabel(header: str, offset: int) -> str:
    match = _HUNK.match(header)
    if match is None:
        return header
    old, old_len, new, new_len = match.groups()
    return f"@@ -{int(old) + offset}{old_len or ''} +{int(new) + offset}{new_len or ''} @@"


def read_mutants(work: Path, mutated: str) -> list[Mutant]:
    """Every mutant of `mutated` in the mutmut run in `work`, in mutmut's order.

    Diffs and locations are read only for mutants no test detected: the report
    shows nothing else of killed ones.
    """
    source = (work / mutated).read_text(encoding="utf-8")
    ends = _end_lines(source)
    meta_path = work / "mutants" / f"{mutated}.meta"
    if not ends and not meta_path.exists():
        # A module without functions (a package's __init__ of imports) has no mutants,
        # and mutmut may write no results for it.
        return []
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    lines = source.splitlines()
    entries = sorted(meta["exit_code_by_key"].items(), key=lambda item: _function_of(item[0])[1])
    order = {function: index for index, function in enumerate(ends)}
    entries.sort(key=lambda item: order.get(_function_of(item[0])[0], len(order)))
    mutants = []
    with _cwd(work):
        for name, exit_code in entries:
            function, _ = _function_of(name)
            raw = status_by_exit_code[exit_code]
            status = _STATUS.get(raw, "suspicious")
            if status in ("killed", "crashed"):
                mutants.append(Mutant(name=name, file=mutated, function=function, status=status))
                continue
            line, before, after, diff = _change(name, mutated, lines, ends[function])
            mutants.append(
                Mutant(
                    name=name,
                    file=mutated,
                    function=function,
                    status=status,
                    line=line,
                    before=before,
                    after=after,
                    diff=diff,
                )
            )
    return mutants
