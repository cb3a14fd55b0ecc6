"""The rule every queue name follows, whatever the backend (backends call it too).

Each backend has its own alphabet for names (what its keys or tables can hold); what
no backend may accept is a name that means something else once it is part of a path:
``.`` and ``..``. The dashboard links to ``/queues/NAME``, and a browser (or any URL
resolver) turns ``/queues/..`` into ``/``.
"""

from __future__ import annotations

from taskrunner.errors import ConfigurationError

__all__ = ["check_queue_name"]

_PATH_STEPS = frozenset({".", ".."})


def check_queue_name(name: str, *, setting: str = "queue_name") -> str:
    """`name` if it can name a queue on any backend.

    Raises:
        ConfigurationError: `name` is not a str, is empty, or is ``.`` or ``..``
            (`setting` names the setting in the error).
    """
    if not isinstance(name, str):
        raise ConfigurationError(
            f"{setting} must be a str, not {type(name).__name__}", setting=setting
        )
    if not name:
        raise ConfigurationError(f"{setting} must be a non-empty string", setting=setting)
    if name in _PATH_STEPS:
        raise ConfigurationError(
            f"queue name {name!r} is refused: '.' and '..' are steps of a path, and links "
            "to the queue (the dashboard's /queues/NAME) would lead elsewhere",
            setting=setting,
        )
    return name
