"""Loading the App a command names by import string (internal module of the command line)."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any

from taskrunner.app import App
from taskrunner.errors import ConfigurationError

__all__ = ["load_app"]


def load_app(spec: str, *, where: str = "--app") -> App:
    """Import the `App` named by ``MODULE:ATTRIBUTE`` (a dotted attribute path is fine).

    The attribute may be an `App` or a function taking no arguments that returns one.
    The current directory is put on the import path first (as ``python -m`` does), so
    ``taskrunner worker myproject.tasks:app`` works from the project directory.

    Args:
        spec: ``MODULE:ATTRIBUTE``.
        where: Where `spec` came from, for error messages.

    Raises:
        ConfigurationError: `spec` is malformed, the module cannot be found, the
            attribute is missing, or it is not an App. An ImportError raised *inside*
            the module propagates unchanged (its traceback is what you need).
    """
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ConfigurationError(
            f"{where}: {spec!r} must be MODULE:ATTRIBUTE, e.g. myproject.tasks:app",
            setting="app",
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigurationError(
                f"{where}: cannot import module {module_name!r} ({exc}); run the command "
                "from the directory containing it, or install it",
                setting="app",
            ) from None
        raise
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            apps = sorted(name for name, value in vars(module).items() if isinstance(value, App))
            raise ConfigurationError(
                f"{where}: module {module_name!r} has no attribute {attribute!r}; "
                f"App objects in it: {', '.join(apps) or 'none'}",
                setting="app",
            ) from None
    if not isinstance(obj, App) and _is_factory(obj):
        obj = obj()
    if not isinstance(obj, App):
        raise ConfigurationError(
            f"{where}: {spec!r} is a {type(obj).__name__}, not a taskrunner.App "
            "(or a function returning one)",
            setting="app",
        )
    return obj


def _is_factory(obj: Any) -> bool:
    """Whether `obj` is a function that can be called without arguments."""
    if not callable(obj) or isinstance(obj, type):
        return False
    try:
        inspect.signature(obj).bind()
    except (TypeError, ValueError):
        return False
    return True
