"""Opening a backend from a URL.

The URL's scheme picks the backend: ``memory://``, ``redis://``, ``rediss://``,
``unix://``, ``redis+cluster://`` and ``postgresql://`` (or ``postgres://``) are built
in; a third-party package adds a scheme with an entry point in the
``taskrunner.backends`` group, naming an async factory::

    [project.entry-points."taskrunner.backends"]
    foo = "taskrunner_foo:open_from_url"

    async def open_from_url(url: str, *, queue_name: str, clock: Clock | None) -> Queue: ...

Backends are imported only when a URL asks for them, so a user of ``memory://`` never
imports redis-py. This table is the one place the core names a backend module; the
testing kit opens its private memory queues through it too (`private_memory_queue`).
"""

from __future__ import annotations

import asyncio
import difflib
import importlib
import re
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.metadata import entry_points
from typing import Any, Protocol, cast

from taskrunner.clock import Clock
from taskrunner.errors import ConfigurationError
from taskrunner.names import check_queue_name
from taskrunner.queue import Queue, TransactionalAdd
from taskrunner.redaction import mask_secrets, mask_url, url_secrets

__all__ = [
    "DEFAULT_URL",
    "ENTRY_POINT_GROUP",
    "check_url",
    "connect",
    "import_backend",
    "known_schemes",
    "migrate",
    "OutboxRelay",
    "open_queue",
    "outbox_relay",
    "outbox_writer",
    "private_memory_queue",
    "schema_status",
]

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
    "redis+cluster": "taskrunner_backends.redis:open_cluster_from_url",
    "rediss+cluster": "taskrunner_backends.redis:open_cluster_from_url",
    "postgresql": "taskrunner_backends.postgres:open_from_url",
    "postgres": "taskrunner_backends.postgres:open_from_url",
}

BackendFactory = Callable[..., Awaitable[Queue]]

# A scheme followed by a mistyped separator: "redis:/", "redis//", "redis:" ...
_SCHEME_TYPO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)(?P<separator>:/*|/+)")


def known_schemes() -> list[str]:
    """Every URL scheme a backend is available for, built-in or installed."""
    schemes = set(_BUILT_IN)
    schemes.update(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
    return sorted(schemes)


def check_url(url: str) -> str:
    """Check that `url` has a scheme some backend serves; returns the scheme (lower case).

    Only the scheme and that the URL splits into its parts are checked here; each
    backend checks the rest of its URL (host, options) when it opens it. Nothing is
    imported.

    Raises:
        ConfigurationError: The URL has no scheme, cannot be split into its parts (an
            unbalanced ``[`` of an IPv6 host), or no backend serves it (the message
            lists the known schemes and suggests the closest).
    """
    if not isinstance(url, str):
        raise ConfigurationError(
            f"backend URL must be a string, got {type(url).__name__}", setting="url"
        )
    scheme, separator, _ = url.partition("://")
    if not separator or not scheme:
        raise ConfigurationError(_no_scheme(url), setting="url")
    scheme = scheme.lower()
    _check_structure(url)
    known = known_schemes()
    if scheme not in known:
        close = difflib.get_close_matches(scheme, known, n=1)
        hint = f"did you mean {close[0]}://? " if close else ""
        raise ConfigurationError(
            f"no backend for URL scheme {scheme!r} in {mask_url(url)!r}; {hint}"
            f"known schemes: {', '.join(known)} (a third-party backend adds its scheme "
            f"with an entry point in the {ENTRY_POINT_GROUP!r} group)",
            setting="url",
        )
    return scheme


def _no_scheme(url: str) -> str:
    """What is wrong with `url`, which has no ``scheme://``: a mistyped one, or none."""
    typo = _SCHEME_TYPO.match(url)
    if typo is not None and typo["scheme"].lower() in known_schemes():
        scheme, rest = typo["scheme"], url[typo.end() :]
        # Masked as the URL it was meant to be, so its user information is found.
        meant = mask_url(f"{scheme}://{rest}")
        written = f"{scheme}{typo['separator']}{meant.partition('://')[2]}"
        return (
            f"backend URL {written!r} has {typo['separator']!r} after its scheme instead "
            f"of '://'; expected {meant!r}"
        )
    return (
        f"backend URL {mask_url(url)!r} has no scheme; expected e.g. memory:// or "
        "redis://127.0.0.1:6379/0"
    )


def _check_structure(url: str) -> None:
    """Refuse a URL that urllib cannot split, which every backend would fail on."""
    try:
        urllib.parse.urlsplit(url)
    except ValueError as exc:
        if "IPv6" in str(exc):
            problem = (
                "its host has an unbalanced '[' or ']' (an IPv6 address is written in "
                "brackets: [::1]:6379)"
            )
        else:
            # urllib may quote the host part, user information included.
            problem = mask_secrets(str(exc), url_secrets(url))
        raise ConfigurationError(
            f"backend URL {mask_url(url)!r} cannot be parsed: {problem}", setting="url"
        ) from None


def _factory(scheme: str) -> BackendFactory:
    target = _BUILT_IN.get(scheme)
    factory: Any
    if target is not None:
        module_name, _, attribute = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigurationError(
                f"backend for {scheme}:// ({target}) cannot be imported: {exc}", setting="url"
            ) from exc
        factory = getattr(module, attribute, None)
    else:
        entry_point = next(iter(entry_points(group=ENTRY_POINT_GROUP, name=scheme)))
        target = f"{entry_point.value} (entry point {scheme!r} in {ENTRY_POINT_GROUP!r})"
        try:
            factory = entry_point.load()
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(
                f"backend for {scheme}:// ({target}) cannot be loaded: {exc}", setting="url"
            ) from exc
    if not callable(factory):
        raise ConfigurationError(
            f"backend for {scheme}:// names {target}, which is not a callable factory",
            setting="url",
        )
    return cast(BackendFactory, factory)


def _backend_module(scheme: str) -> Any:
    """The module holding the factory of `scheme` (built in or an entry point's), imported."""
    target = _BUILT_IN.get(scheme)
    if target is None:
        entry_point = next(iter(entry_points(group=ENTRY_POINT_GROUP, name=scheme)))
        target = entry_point.value
    module_name = target.partition(":")[0].strip()
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"backend for {scheme}:// ({module_name}) cannot be imported: {exc}", setting="url"
        ) from exc


def import_backend(url: str) -> None:
    """Import the module of the backend `url` names, without opening anything.

    So that the secret options the backend declares when imported
    (`taskrunner.redaction.register_secret_options`) are known before anything showing
    the URL is printed: the command line calls it before it masks any output, also in
    commands that never open the URL (``taskrunner config``). Does nothing when the
    URL names no backend or its module cannot be imported: opening the URL reports that
    (a module that failed to import runs again when imported again, and fails again).
    """
    try:
        _backend_module(check_url(url))
    except Exception:  # whatever it is, opening the URL raises it again
        return


async def migrate(url: str) -> list[str]:
    """Bring the backend's schema at `url` to the latest version; returns the steps applied.

    A backend that keeps a schema (PostgreSQL) offers ``migrate_from_url(url) ->
    list[str]`` beside its factory; the steps are described as it words them, and an
    empty list means the schema was already up to date. Running it again is harmless.

    Raises:
        ConfigurationError: The URL is malformed, its scheme unknown, its backend has no
            schema to migrate, or the schema is newer than this taskrunner.
        BackendUnavailableError: The backend could not be reached.
    """
    scheme = check_url(url)
    migrate_from_url = getattr(_backend_module(scheme), "migrate_from_url", None)
    if not callable(migrate_from_url):
        raise ConfigurationError(f"the {scheme} backend has no schema to migrate", setting="url")
    applied = await migrate_from_url(url)
    return [str(step) for step in applied]


async def schema_status(url: str) -> dict[str, Any]:
    """What the backend at `url` says about its schema; reads, changes nothing.

    A backend that keeps a schema offers ``status_from_url(url) -> dict`` beside
    ``migrate_from_url``: a JSON-ready mapping with at least ``state``, one of
    ``up-to-date``, ``needs-migrate`` or ``newer`` (PostgreSQL's keys: see
    `taskrunner_backends.postgres.status`).

    Raises:
        ConfigurationError: The URL is malformed, its scheme unknown, or its backend
            keeps no schema.
        BackendUnavailableError: The backend could not be reached.
    """
    scheme = check_url(url)
    status_from_url = getattr(_backend_module(scheme), "status_from_url", None)
    if status_from_url is None:
        # The module of the factory has no hook; a built-in backend may keep it in a
        # submodule of its own (PostgreSQL: ``.status``), imported only when asked.
        target = _BUILT_IN.get(scheme, "")
        if target:
            try:
                status_module = importlib.import_module(f"{target.partition(':')[0]}.status")
            except ImportError:
                status_module = None
            status_from_url = getattr(status_module, "status_from_url", None)
    if not callable(status_from_url):
        raise ConfigurationError(f"the {scheme} backend has no schema to report", setting="url")
    status: dict[str, Any] = dict(await status_from_url(url))
    return status


class OutboxRelay(Protocol):
    """A relay moving committed outbox rows into a queue (see `outbox_relay`)."""

    async def run(self, ready: asyncio.Event | None = None) -> None:
        """Relay until cancelled; `ready` is set once it is connected."""
        ...


def _outbox_hook(outbox_url: str, name: str) -> Callable[..., Any]:
    scheme = check_url(outbox_url)
    hook = getattr(_backend_module(scheme), name, None)
    if not callable(hook):
        raise ConfigurationError(
            f"outbox_url {mask_url(outbox_url)}: the {scheme} backend keeps no outbox "
            "(the outbox lives in a PostgreSQL database: postgresql://...)",
            setting="outbox_url",
        )
    return cast("Callable[..., Any]", hook)


def outbox_relay(outbox_url: str, queue: Queue, queue_name: str) -> OutboxRelay:
    """The relay of `queue_name`'s rows in the outbox at `outbox_url` into `queue`.

    The outbox's backend offers ``relay_from_url(outbox_url, queue, queue_name)``
    beside its factory (PostgreSQL does).

    Raises:
        ConfigurationError: A bad URL, a backend without an outbox, or a queue the
            relay cannot add to idempotently.
    """
    relay: OutboxRelay = _outbox_hook(outbox_url, "relay_from_url")(outbox_url, queue, queue_name)
    return relay


def outbox_writer(outbox_url: str, queue_name: str) -> TransactionalAdd:
    """What `Producer(..., outbox=)` takes to write `queue_name`'s rows into that outbox.

    The outbox's backend offers ``writer_from_url(outbox_url, queue_name)``.

    Raises:
        ConfigurationError: A bad URL or a backend without an outbox.
    """
    writer: TransactionalAdd = _outbox_hook(outbox_url, "writer_from_url")(outbox_url, queue_name)
    return writer


async def connect(url: str, queue_name: str, *, clock: Clock | None = None) -> Queue:
    """Open the queue `queue_name` on the backend `url` names; close it with ``aclose``.

    Raises:
        ConfigurationError: The URL is malformed, its scheme unknown, an option bad,
            or `queue_name` is no name any backend takes (`check_queue_name`).
        BackendUnavailableError: The backend could not be reached.
    """
    check_queue_name(queue_name)
    factory = _factory(check_url(url))
    return await factory(url, queue_name=queue_name, clock=clock)


def private_memory_queue(*, clock: Clock | None = None) -> Queue:
    r"""A new in-process queue on a store of its own (the ``memory://`` backend's).

    Not `connect`\ ``("memory://NAME")``: a named store is registered for the whole
    process, while this one is shared with nobody and freed with its last handle, as
    each test wants. Synchronous (the pytest fixtures are); the memory backend offers
    it as ``open_private(*, clock)`` beside its ``open_from_url``.

    Raises:
        ConfigurationError: The memory backend cannot be imported or lacks the hook.
    """
    open_private = getattr(_backend_module("memory"), "open_private", None)
    if not callable(open_private):
        raise ConfigurationError(
            "the memory backend has no open_private(*, clock) hook", setting="url"
        )
    return cast(Queue, open_private(clock=clock))


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
