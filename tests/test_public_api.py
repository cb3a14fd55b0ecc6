"""The public surface: exports, error tree, typing marker."""

from __future__ import annotations

import importlib.resources

import taskrunner
from taskrunner import errors


def test_all_lists_every_public_name_once() -> None:
    public = {name for name in dir(taskrunner) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(taskrunner, name)).__name__ == "module"}

    assert len(taskrunner.__all__) == len(set(taskrunner.__all__))
    assert set(taskrunner.__all__) - {"__version__"} == public - modules


def test_every_exported_exception_derives_from_taskrunner_error() -> None:
    for name in errors.__all__:
        error = getattr(errors, name)
        assert issubclass(error, taskrunner.TaskrunnerError), name
        assert getattr(taskrunner, name) is error


def test_packages_ship_the_typing_marker() -> None:
    for package in ("taskrunner", "taskrunner_backends", "taskrunner_conformance"):
        assert importlib.resources.files(package).joinpath("py.typed").is_file()
