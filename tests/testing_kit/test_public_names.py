"""taskrunner.testing's public surface: __all__ lists every public name once."""

from __future__ import annotations

import taskrunner.testing


def test_all_lists_every_public_name_of_the_kit() -> None:
    public = {
        name
        for name in dir(taskrunner.testing)
        if not name.startswith("_")
        and type(getattr(taskrunner.testing, name)).__name__ != "module"
        and name != "annotations"
    }
    assert sorted(taskrunner.testing.__all__) == sorted(public)
    assert len(set(taskrunner.testing.__all__)) == len(taskrunner.testing.__all__)
