"""pytest plugin for the mutation runs: leave out the randomised model-based test.

A mutant counts as killed only by a deterministic test, so the hypothesis state
machine (P40) is deselected: a kill that depends on which examples hypothesis draws
would make the report change from run to run. Selected by property id, so renaming
the test does not bring it back.
"""

from __future__ import annotations

import pytest

# Property ids whose tests draw random operations.
RANDOMISED_PROPERTIES = frozenset({"P40"})


def checked_properties(item: pytest.Item) -> frozenset[str]:
    """The conformance property ids a collected test declares (none for other tests)."""
    function = getattr(item, "function", None)
    return frozenset(getattr(function, "conformance_properties", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    randomised = [item for item in items if checked_properties(item) & RANDOMISED_PROPERTIES]
    if randomised:
        config.hook.pytest_deselected(items=randomised)
        items[:] = [item for item in items if item not in randomised]
