"""The import-linter contracts in pyproject.toml name every module of taskrunner.

`lint-imports` (in ``nox -s lint``) checks that backends import only the contract,
errors, clock and URL redaction, and that the conformance suite imports only the
public contract. Its contracts list what is *forbidden*; a module added later would be
allowed silently. This test makes every module of taskrunner either explicitly allowed
here or forbidden there.
"""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import pytest

import taskrunner
import taskrunner_backends

ROOT = Path(__file__).resolve().parents[1]

ALLOWED = {
    "backends import only the contract, errors, clock and URL redaction": {
        "queue",
        "queue_extensions",
        "queue_parts",
        "queue_transactional",
        "queue_flow",
        "errors",
        "clock",
        "redaction",
        "names",
    },
    "the conformance suite imports only the public contract (queue, errors, clock, testing)": {
        "queue",
        "queue_extensions",
        "queue_parts",
        "queue_transactional",
        "queue_flow",
        "errors",
        "clock",
        "testing",
    },
}


def contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {c["name"]: c for c in config["tool"]["importlinter"]["contracts"]}


def taskrunner_modules() -> set[str]:
    return {module.name for module in pkgutil.iter_modules(taskrunner.__path__)}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_every_module_is_allowed_or_forbidden_by_the_contract(name: str) -> None:
    forbidden = contracts()[name]["forbidden_modules"]
    assert isinstance(forbidden, list)
    forbidden_here = {
        m.removeprefix("taskrunner.") for m in forbidden if m.startswith("taskrunner.")
    }

    assert not forbidden_here & ALLOWED[name]
    assert taskrunner_modules() == forbidden_here | ALLOWED[name]


def test_the_core_never_imports_a_backend_or_the_suite() -> None:
    contract = contracts()["the core never imports a backend or the conformance suite"]

    assert contract["source_modules"] == ["taskrunner"]
    assert contract["forbidden_modules"] == ["taskrunner_backends", "taskrunner_conformance"]


# Modules of taskrunner_backends that are shared helpers, not backends.
BACKEND_HELPERS = {"checks"}


def test_every_backend_is_kept_free_of_import_cycles() -> None:
    # The acyclic_siblings contract only checks the packages it names: a backend added
    # later would be left out silently.
    contract = contracts()["no import cycles inside a backend package"]
    backends = {
        f"taskrunner_backends.{module.name}"
        for module in pkgutil.iter_modules(taskrunner_backends.__path__)
        if module.name not in BACKEND_HELPERS
    }

    ancestors = contract["ancestors"]
    assert isinstance(ancestors, list)

    assert contract["type"] == "acyclic_siblings"
    assert set(ancestors) == backends
