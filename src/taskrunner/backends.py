"""Opening a backend from a URL.

The URL's scheme picks the backend: ``memory://`` and ``redis://``, ``rediss://``,
``unix://`` are built in; a third-party package adds a scheme with an entry point in
the ``taskrunner.backends`` group, naming an async factory::

    [project.entry-points."taskrunner.backends"]
    foo = "taskrunner_foo:open_from_url"

    async def open_from_url(url: str, *, queue_name: str, clock: Clock | None) -> Queue: ...

Backends are imported only when a URL asks for them, so a user of ``memory://`` never
imports redis-py.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.metadata import entry_points
from typing import Any, cast

from taskrunner.clock import Clock
from taskrunner.errors import ConfigurationError
from taskrunner.logs import mask_url
from taskrunner.queue import Queue

__all__ = ["DEFAULT_URL", "connect", "known_schemes", "open_queue"]

# Used when nothing is configured: serves without installing any server.
DEFAULT_URL = "memory://"

ENTRY_POINT_GROUP = "taskrunner.backends"

# Built-in schemes, resolved without entry-point metadata (which an uninstalled source
# tree lacks) and imported lazily.
_BUILT_IN = {
    "memory": "taskrunner_backends.memory:open_from_url",
    "redis": "taskrunner_backends.redis:open_from_url",
    "rediss": "taskrunner_backends.redis:open_from_url",
    "unix": "taskrunner_backends.redis:open_from_url",
}

BackendFactory = Callable[..., Awaitable[Queue]]


def known_schemes() -> list[str]:
    """Every URL scheme a backend is available for, built-in or installed."""
    schemes = set(_BUILT_IN)
    schemes.update(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    return sorted(schemes)


def _factory(scheme: str, url: str) -> BackendFactory:
    target = _BUILT_IN.get(scheme)
    if target is None:
        for ep in entry_points(group=ENTRY_POINT_GROUP, name=scheme):
            target = ep.value
            break
    if target is None:
        raise ConfigurationError(
            f"no backend for URL scheme {scheme!r} in {mask_url(url)!r}; "
            f"known schemes: {', '.join(known_schemes())}",
            setting="url",
        )
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"backend for {scheme}:// ({target}) cannot be imported: {exc}", setting="url"
        ) from exc
    factory: Any = getattr(module, attribute, None)
    if not callable(factory):
        raise ConfigurationError(
            f"backend for {scheme}:// names {target}, which is not a callable factory",
            setting="url",
        )
    return cast(BackendFactory, factory)


async def connect(url: str, queue_name: str, *, clock: Clock | None = None) -> Queue:
    """Open the queue `queue_name` on the backend `url` names; close it with ``aclose``.

    Raises:
        ConfigurationError: The URL is malformed, its scheme unknown, or an option bad.
        BackendUnavailableError: The backend could not be reached.
    """
    scheme, separator, _ = url.partition("://")
    if not separator or not scheme:
        raise ConfigurationError(
            f"backend URL {mask_url(url)!r} has no scheme; expected e.g. memory:// or "
            "redis://host:6379/0",
            setting="url",
        )
    factory = _factory(scheme.lower(), url)
    return await factory(url, queue_name=queue_name, clock=clock)


@asynccontextmanager
async def open_queue(
    url: str = DEFAULT_URL, queue_name: str = "default", *, clock: Clock | None = None
) -> AsyncIterator[Queue]:
    """`connect`, as an async context manager that closes the queue on exit."""
    queue = await connect(url, queue_name, clock=clock)
    try:
        yield queue
    finally:
        await queue.aclose()
