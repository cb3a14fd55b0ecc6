"""Opening a memory queue: by ``memory://`` URL, or on a store of its own.

`open_from_url` is the engine's entry point; `open_private` is what the testing kit
runs on (through `taskrunner.backends.private_memory_queue`).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from taskrunner.clock import Clock
from taskrunner.errors import ConfigurationError
from taskrunner.names import check_queue_name

from .queue import InMemoryQueue
from .store import _NAMED_STORES

__all__ = ["open_from_url", "open_private"]

_URL_OPTIONS = ("requires_heartbeat",)


async def open_from_url(url: str, *, queue_name: str, clock: Clock | None = None) -> InMemoryQueue:
    """Open ``memory://[NAME][?requires_heartbeat=true|false]`` for queue `queue_name`.

    Handles opened with the same NAME and queue name in one process share a store; the
    first opener's clock and options win.

    Raises:
        ConfigurationError: An unknown option, a value that is not a boolean, or a
            queue name no backend takes (`taskrunner.names.check_queue_name`).
    """
    check_queue_name(queue_name)
    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - set(_URL_OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"unknown memory:// option(s) {', '.join(unknown)}; known: {', '.join(_URL_OPTIONS)}",
            setting="url",
        )
    requires_heartbeat = _parse_bool(options.get("requires_heartbeat", "true"))
    key = f"{parts.netloc}{parts.path}/{queue_name}"
    store = _NAMED_STORES.get(key)
    if store is None:
        store = InMemoryQueue(clock=clock, requires_heartbeat=requires_heartbeat)._store
        _NAMED_STORES[key] = store
    handle = InMemoryQueue._on_store(store)
    handle._url_prefix = f"{parts.netloc}{parts.path}/"
    return handle


def open_private(*, clock: Clock | None = None) -> InMemoryQueue:
    """A queue on a new store of its own, registered under no name.

    Unlike ``memory://NAME``, whose store lives as long as the process, it is shared
    with nobody and freed with its last handle: one per test. `taskrunner.backends`
    finds it beside `open_from_url` (`taskrunner.backends.private_memory_queue`).
    """
    return InMemoryQueue(clock=clock)


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(
        f"requires_heartbeat must be true or false, got {text!r}", setting="requires_heartbeat"
    )
