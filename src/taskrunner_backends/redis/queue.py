"""`RedisStreamsQueue`: the `taskrunner.queue.Queue` contract over Redis Streams.

How it works. A queue is one stream read through one consumer group (created at id
``0`` by the first receive or reclaim, so a backlog added before any worker started is
delivered; a vanished group is recreated the same way; opening a queue creates
nothing). `receive` is ``XREADGROUP >``, so a lease is a pending-entries-list (PEL)
entry and its age is the entry's idle time, measured on the server's clock.

Where each part is (each module's opening comment gives its design):

* `receiving`: `receive` (with the doorbell that keeps delayed messages prompt) and
  `reclaim`; `receipts`: the lease in the holder's name and the receipt token;
* `fencing`: heartbeat, ack, release (with a delay) and dead letter, fenced by receipt;
* `adding`: `add`, delayed, unique and flow-controlled adds (`add_requests`), `cancel`,
  durable enqueue (admission of flow-controlled messages is in `receiving`);
* `leadership`: leader leases and scheduled fires;
* `results`: the result store and the listener behind `wait_result`;
* `lookup` and `browse`: reading messages by id or by page, writing nothing;
* `admin`: stats, dead letters, purge and delete, consumers, queue names;
  `workers`: the worker registry;
* `base`: the state and calls they share (initialise, scripts, the consumer group);
  `server`: the server's version check; `replies`, `arguments`: small helpers.

The parts are mixins of `base.QueueBase` composed here, because the queue *is* each
of its optional parts (``queue.admin is queue``): one object, one set of methods.

Persistence. Messages survive a server restart only as far as the server persists
them (AOF ``appendfsync always`` loses nothing acknowledged; the default ``everysec``
up to a second; RDB-only everything since the last snapshot). After a restart every
lease looks expired (downtime counts as idle). `add` does not wait for replicas or
fsync (``durable_enqueue`` is not claimed). Run Redis with ``maxmemory-policy
noeviction``: eviction of a queue key loses the messages in it.

Example::

    queue = await open_from_url("redis://localhost:6379/0?namespace=app", queue_name="emails")
    await queue.add([b"hello"])
    [delivery] = await queue.receive("worker-1", max_messages=10, wait_seconds=5)
    await queue.ack([delivery])
    await queue.aclose()

Server support: Redis >= 7.0 and Valkey >= 7.2 (checked at open).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import redis.asyncio as aioredis

from taskrunner.clock import Clock, SystemClock
from taskrunner.errors import ConfigurationError
from taskrunner.queue import (
    CONTRACT_VERSION,
    Capabilities,
)
from taskrunner.queue_parts import (
    AdminOnSelf,
    BrowseOnSelf,
    ConsumerCleanupOnSelf,
    LeadershipOnSelf,
    LookupOnSelf,
    QueueNamesOnSelf,
    ResultsOnSelf,
    SchedulingOnSelf,
    WorkerRegistryOnSelf,
)
from taskrunner.redaction import mask_secrets, mask_url, url_secrets

from .adding import ADD_REQUESTS_BATCH, DURABLE_WAIT_SECONDS, AddingMixin
from .admin import NAMES_SCAN_CALLS, NAMES_SCAN_COUNT, STATS_PENDING_SAMPLE, AdminMixin
from .arguments import _milliseconds
from .base import Durability
from .browse import BrowseMixin
from .client import RawClient
from .errors import translate_errors
from .fencing import FENCED_BATCH
from .keys import QueueKeys
from .leadership import LeadershipMixin
from .lookup import LOOKUP_BATCH, LookupMixin
from .receiving import (
    BLOCK_READ_MARGIN_SECONDS,
    DELAYED_LATENESS_SECONDS,
    DELAYED_RECHECK_SECONDS,
    PROMOTE_BATCH,
    RECLAIM_SCAN_BUDGET,
    SERVER_TICK_SECONDS,
    ReceiveMixin,
)
from .results import RESULTS_BATCH, ResultListener, ResultsMixin
from .server import ServerInfo, check_server
from .url import split_url
from .workers import WorkersMixin

__all__ = [
    "ADD_REQUESTS_BATCH",
    "BLOCK_READ_MARGIN_SECONDS",
    "DELAYED_LATENESS_SECONDS",
    "DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS",
    "DELAYED_RECHECK_SECONDS",
    "DEFAULT_SOCKET_TIMEOUT_SECONDS",
    "DURABLE_WAIT_SECONDS",
    "Durability",
    "FENCED_BATCH",
    "LOOKUP_BATCH",
    "NAMES_SCAN_CALLS",
    "NAMES_SCAN_COUNT",
    "PRIORITY_AGING_SECONDS",
    "PROMOTE_BATCH",
    "RESULTS_BATCH",
    "RECLAIM_SCAN_BUDGET",
    "STATS_PENDING_SAMPLE",
    "SERVER_TICK_SECONDS",
    "RedisStreamsQueue",
    "ServerInfo",
    "check_server",
    "open_from_url",
]

# Socket timeouts (seconds) for clients built by `open_from_url` when the URL sets none;
# redis-py's default is to wait forever for a reply.
DEFAULT_SOCKET_TIMEOUT_SECONDS = 10.0
DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS = 5.0

#: How long (seconds) the oldest ready message of a priority waits for each level it
#: rises, by default (as the memory backend): a steady flow of priority-9 messages
#: delays a priority-0 one by at most 9 periods.
PRIORITY_AGING_SECONDS = 60.0

_CAPABILITIES = Capabilities(
    blocking_receive=True,
    # A cancelled XREADGROUP may already have leased entries whose reply is lost;
    # they come back only through reclaim.
    cancel_safe_receive=False,
    ordering="fifo",
    persistent=True,
    durable_enqueue=False,
    shared_across_instances=True,
    max_batch=None,
    lease_precision_seconds=0.05,
    delayed_add=True,
    unique_add=True,
    cancel=True,
    leadership=True,
    results=True,
    result_notify=True,
    lookup=True,
    browse=True,
    flow_control=True,
    priorities=True,
    priority_aging_seconds=None,
)

_DURABLE_CAPABILITIES = msgspec.structs.replace(_CAPABILITIES, durable_enqueue=True)


class RedisStreamsQueue(
    ReceiveMixin,
    AddingMixin,
    LeadershipMixin,
    ResultsMixin,
    LookupMixin,
    BrowseMixin,
    AdminMixin,
    WorkersMixin,
    AdminOnSelf,
    WorkerRegistryOnSelf,
    ConsumerCleanupOnSelf,
    SchedulingOnSelf,
    LeadershipOnSelf,
    ResultsOnSelf,
    LookupOnSelf,
    BrowseOnSelf,
    QueueNamesOnSelf,
):
    """A `taskrunner.queue.Queue` on Redis Streams, with every optional part.

    It is its own `QueueAdmin`, `WorkerRegistry`, `ConsumerCleanup`, `Scheduling`,
    `Leadership` and `ResultStore`; its ``lookup``, ``browse`` and ``queue_names``
    parts forward to `lookup_messages`, `browse_messages` and `list_queue_names`
    (the `taskrunner.queue_parts` bases, listed after the mixins implementing them).

    Args:
        client: A ``redis.asyncio.Redis``; its connection pool is used, its reply
            decoding and protocol settings do not matter. Closed by `aclose` only when
            `owns_client` is true.
        queue_name: The queue; becomes the hash tag of every key (see `keys`).
        namespace: Key prefix shared by all queues of one application (default
            ``"taskrunner"``).
        clock: Bounds the waits of `receive`; leases and delays are measured on the
            server's clock, whatever this is.
        owns_client: Close `client` in `aclose` (set by `open_from_url`).
        durable: ``"replica"``: every `add` and `add_requests` call also waits (``WAIT``,
            in the same round trip) until one replica has the messages, and raises
            `BackendUnavailableError` when none confirms within
            `DURABLE_WAIT_SECONDS`; ``"aof"``: until one replica has written them to
            its AOF and fsynced it (``WAITAOF 0 1``, Redis and Valkey 7.2+, replicas
            with ``appendonly yes``). Either claims ``durable_enqueue``. Empty (the
            default): adds return when the master has them.
        priority_aging_seconds: How long the oldest ready message of a priority waits
            for each level it rises (`Capabilities.priority_aging_seconds`), measured
            from its stream entry's time on the server's clock; None: strict
            priorities. Messages of a priority above 0 live on one stream per priority
            (see `keys`); a queue that never used one reads and pays as before.

    Initialisation (version check, feature detection, group creation) happens in
    `initialize`, which `open` and `open_from_url` await and every other method runs
    lazily on first use. Handles opened on the same server, namespace and queue name,
    in one process or many, share the queue.
    """

    contract_version = CONTRACT_VERSION  # what the conformance suite checks

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        queue_name: str,
        namespace: str = "taskrunner",
        clock: Clock | None = None,
        owns_client: bool = False,
        durable: Durability = "",
        priority_aging_seconds: float | None = PRIORITY_AGING_SECONDS,
        _display: str | None = None,
        _shard: str = "",
        _raw: RawClient | None = None,
    ) -> None:
        if durable not in ("", "replica", "aof"):
            raise ConfigurationError(
                f"durable must be replica or aof (or empty), got {durable!r}", setting="durable"
            )
        self._durable: Durability = durable
        if _raw is None and not isinstance(client, aioredis.Redis):
            raise TypeError(f"client must be a redis.asyncio.Redis, not {type(client).__name__}")
        self._keys = QueueKeys(namespace=namespace, queue_name=queue_name, shard=_shard)
        self._client = client
        self._raw = _raw if _raw is not None else RawClient(client)
        self._clock: Clock = clock or SystemClock()
        self._owns_client = owns_client
        self._display = _display or _describe_client(client)
        self._closed = False
        self._initialized = False
        self._init_lock = asyncio.Lock()
        self._server: ServerInfo | None = None
        self._has_xackdel = False
        self._reclaim_cursor = "0-0"
        self._level_cursors: dict[int, str] = {}
        self._levels: tuple[int, ...] = ()
        self._aging_ms = (
            0
            if priority_aging_seconds is None
            else _milliseconds("priority_aging_seconds", priority_aging_seconds, positive=True)
        )
        self._capabilities = msgspec.structs.replace(
            _DURABLE_CAPABILITIES if durable else _CAPABILITIES,
            priority_aging_seconds=priority_aging_seconds,
        )
        self._group_created = False
        self._blocking: set[asyncio.Task[Any]] = set()
        self._cancelled_by_close: set[asyncio.Task[Any]] = set()
        self._listener: ResultListener | None = None

    @classmethod
    async def open(
        cls,
        client: aioredis.Redis,
        *,
        queue_name: str,
        namespace: str = "taskrunner",
        clock: Clock | None = None,
    ) -> RedisStreamsQueue:
        """Build a queue on an injected client and initialise it now (fail fast).

        Raises:
            UnsupportedServerError: The server is too old.
            BackendUnavailableError: The server could not be reached.
        """
        queue = cls(client, queue_name=queue_name, namespace=namespace, clock=clock)
        await queue.initialize()
        return queue

    def __repr__(self) -> str:
        return (
            f"RedisStreamsQueue(queue_name={self._keys.queue_name!r}, "
            f"namespace={self._keys.namespace!r}, server={self._display!r})"
        )

    @property
    def requires_heartbeat(self) -> bool:
        """Always True: a lease lapses when its entry stays idle past the reclaimers' limit."""
        return True

    @property
    def capabilities(self) -> Capabilities:
        """Blocking, FIFO per consumer, shared, persistent as far as the server persists.

        Not cancel-safe: a cancelled receive may leave entries leased until reclaimed.
        """
        return self._capabilities

    # -- lifecycle ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the queue; idempotent.

        Receives blocked in this queue and pending `wait_result` calls raise
        `QueueClosedError`; the result listener, if one runs, is stopped and awaited.
        """
        if self._closed:
            return
        self._closed = True
        for task in list(self._blocking):
            # Only these cancellations become QueueClosedError; any other stays one.
            self._cancelled_by_close.add(task)
            task.cancel()
        if self._listener is not None:
            # Cancels and awaits the listener task; pending waits raise QueueClosedError.
            await self._listener.aclose()
        if self._owns_client:
            with translate_errors("close"):
                await self._client.aclose()


async def open_from_url(
    url: str, *, queue_name: str, clock: Clock | None = None
) -> RedisStreamsQueue:
    """Open the queue `queue_name` at `url` (the engine's entry point for redis/rediss/unix).

    ``redis://[[user]:password@]host[:port][/db][?namespace=NAME&<redis-py options>]``;
    ``rediss://`` uses TLS; ``unix:///path/to.sock?db=N``. The client is created here
    (socket timeouts default to `DEFAULT_SOCKET_TIMEOUT_SECONDS` and
    `DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS` unless the URL sets them) and closed by
    `RedisStreamsQueue.aclose`. The server is checked before this returns.

    Raises:
        ConfigurationError: Unknown scheme or option, or an invalid URL or name.
        UnsupportedServerError: The server is too old.
        BackendUnavailableError: The server could not be reached.
    """
    redis_url, options = split_url(url)
    try:
        client = aioredis.Redis.from_url(
            redis_url,
            socket_timeout=DEFAULT_SOCKET_TIMEOUT_SECONDS,
            socket_connect_timeout=DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS,
        )
    except (ValueError, TypeError) as exc:
        # redis-py's message may quote part of the URL: mask the password in it too.
        problem = mask_secrets(str(exc), url_secrets(url))
        raise ConfigurationError(
            f"invalid Redis URL {mask_url(url)}: {problem}", setting="url"
        ) from None
    try:
        queue = RedisStreamsQueue(
            client,
            queue_name=queue_name,
            namespace=options.get("namespace", "taskrunner"),
            clock=clock,
            owns_client=True,
            durable=_durable_option(options.get("durable", ""), url),
            _display=mask_url(url),
        )
        await queue.initialize()
    except BaseException:
        await client.aclose()
        raise
    return queue


def _durable_option(value: str, url: str) -> Durability:
    """The ``durable`` URL option: replica, aof, or off (empty, 0, false, no, off)."""
    word = value.lower()
    if word in ("", "0", "false", "no", "off"):
        return ""
    if word in ("replica", "aof"):
        return word  # type: ignore[return-value]
    raise ConfigurationError(
        f"option durable={value!r} in {mask_url(url)} must be replica (WAIT for one replica), "
        "aof (WAITAOF: one replica fsynced its AOF) or off",
        setting="url",
    )


def _describe_client(client: aioredis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"
