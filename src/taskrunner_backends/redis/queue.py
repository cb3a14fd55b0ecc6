"""`RedisStreamsQueue`: the `taskrunner.queue.Queue` contract over Redis Streams.

How it works. A queue is one stream read through one consumer group (created at id
``0`` by the first receive or reclaim, so a backlog added before any worker started is
delivered; a vanished group is recreated the same way; opening a queue creates
nothing). `receive` is ``XREADGROUP >``, so a lease is a pending-entries-list (PEL)
entry and its age is the entry's idle time, measured on the server's clock.

Leases travel with the holder. The group consumer that holds a lease is named
``<consumer>~<lease ms>``: the caller's consumer name plus the lease it was granted.
`reclaim` scans the PEL and claims an entry only when its idle time exceeds the lease
in its holder's name, so runners with different lease settings never take each
other's heartbeated messages, at no cost per message. Receipts carry the lease in
their token, so the fenced scripts address the right group consumer.

Fencing. Heartbeat, ack, release and dead-letter run in one Lua script
(``lua/fenced.lua``) that first probes the entry with ``XPENDING id id 1`` and acts
only if the owner *and* the delivery count still match the receipt: XCLAIM checks no
owner and XACK is silent, so without the probe a stale holder could steal a message
back or complete somebody else's lease. The delivery count is the lease's epoch, so a
consumer that reclaims its own lapsed message cannot act with its old receipt (ABA).
A heartbeat is ``XCLAIM <same consumer> 0 <id> JUSTID``: idle resets, count stays.
Ack deletes the entry in the same script (``XACKDEL`` where the server has it, found
with COMMAND INFO; ``XACK`` + ``XDEL`` otherwise; one command for the whole batch, after
every entry was checked), so the stream holds only ready and in-flight messages and
never grows with completed work.

Release with a delay. Release atomically removes the entry and re-adds the message
(an XCLAIM with a shifted IDLE would hand it to `reclaim`, and the contract says
released messages come back through `receive`):
with no delay straight onto the stream, with a delay into a parked stream plus a
sorted set keyed by the due time (server clock). `receive` promotes due messages
with a script sent in the same write as its XREADGROUP, just before it (so the read
sees them; the read itself is no script, whose reply would cost a Lua table per
entry), and never blocks past the next due time,
so a released message is redelivered no earlier than its delay and is never lost
(it is in exactly one place at any instant). A message parked by another client while
a receive blocks is invisible to that XREADGROUP; the doorbell (below) wakes the
receive, and as a fallback one blocking read lasts at most `DELAYED_RECHECK_SECONDS`
before the script runs again. The re-added entry carries the
original message id (field ``i``) and its delivery count so far (field ``n``): the
`Delivery` keeps the message id `Queue.add` returned, and its delivery count goes on
from where it was (+1). The price: a released message goes to the back of the queue,
and the receipt's token names the current stream entry. The hash ``origins`` maps each
re-added entry to its message id and earlier count until it completes, so a dead letter
of an entry deleted underneath still names the right message.

Scheduling (`add_requests`, `cancel`). One script per `ADD_REQUESTS_BATCH` requests,
all sent in one round trip. A ready request is a plain stream entry. A delayed one is
parked like a release with a delay, due at ``due_at * 1000`` or ``now + delay`` in
milliseconds of the server's ``TIME``; its message id is reserved from the queue
stream's own id sequence (``XSETID`` moves the stream's last id past it), so delayed
and plain ids never collide and are never reused, even after a purge. The parked entry
carries that id (``i``) and count 0 (``n``), so its delivery keeps the id and counts 1.
A unique key is its own key ``u:<key>`` in the queue's slot holding the message id
(``PX`` for ``unique_seconds``), checked and set in the add's script; the message
carries the key (field ``u``), release and reclaim carry it along, and ack and dead-
letter free it in the fenced script only if it still names the message (receipts of
such messages say so in their token, so a plain ack reads nothing more). The
``uniques`` index lets purge and delete_queue free them without SCAN. The hash
``moved`` maps every message whose entry id is not its id (delayed adds, released
messages) to where it is now; `cancel` uses it and removes a message only when it is
parked or newer than the group's last-delivered id (never read, so in no PEL), in
one script with the key's release. Plain messages' ack and receive are as before.

Promptness: the doorbell. A receive blocks in one XREADGROUP on the stream *and* the
``bell`` stream (its group is created with the queue's). A script that parks a message
due earlier than every message parked before rings it once (one XADD; a burst of
delayed adds rings once), which wakes one blocked receive; that receive acks the ring
in its next script call (no extra round trip) and blocks until the new due time. A
server ends an expired BLOCK only at its next cron tick (100 ms at ``hz 10``), so a
block that ends near a due time is ended by ``CLIENT UNBLOCK`` from another connection
(`SERVER_TICK_SECONDS`). Result: a delayed message is delivered at most
`DELAYED_LATENESS_SECONDS` (50 ms; measured 4-5 ms) after its due time to a receive
that was already blocking, on a server under no load. A woken receive that returns
before the due time rings again to hand it on; a receive that crashed or was cancelled
holding a ring leaves it pending in the bell's group, where `remove_consumers` and
`remove_idle_consumers` clear it, and the others still recheck every
`DELAYED_RECHECK_SECONDS`. Rings never count in `stats` or `len`.

Leadership. One hash ``leaders`` holds each election's lease as ``token|expiry
ms|holder`` (server clock); the field outlives the lease, so a retake after a lapse or
a new holder gets the previous token + 1 and a lapsed lease nobody took still renews.
``fire`` checks the token and the schedule's last instant (hash ``fired``) and XADDs
the body in one script. delete_queue deletes both (tokens then start again at 1).

Results and lookup. A result is the string ``r:<message id>`` in the queue's slot,
``SET ... PX`` (last write wins, TTL restarted), indexed in the ``results`` zset so
delete_queue finds it; a put is one script per `RESULTS_BATCH` results, all in one
round trip, and appends the ids it stored to the capped ``done`` stream. Waits of one
handle share one listener task reading that stream with a blocking XREAD (see
`taskrunner_backends.redis.results`). `lookup_messages` (the ``lookup`` part) reads
where a message is from the stream, the PEL, ``moved`` and the parked set, and finds
dead letters through ``dead_ids`` (original id -> dead-letter id), which only the
dead-letter paths write (one HSET) and retry/purge of dead letters clear.
`browse_messages` (the ``browse`` part) pages by stream entry id in one read-only
script (``lua/browse.lua``): waiting entries are one XRANGE after the group's
last-delivered id, in-flight ones one extended XPENDING plus an XRANGE per entry.

Reclaim. `reclaim` pages through the PEL with ``XPENDING`` from a cursor kept on the
queue object (restarting at the oldest entry when it reaches the end), at most
`RECLAIM_SCAN_BUDGET` entries per call, so lapsed entries behind many live ones are
found. Entries whose payload was deleted (XCLAIM drops them, 7.0+) are recorded as dead
letters ("payload removed from the stream while pending") with their message id and
real delivery count, and entries that are not taskrunner messages (no ``b`` field,
malformed ``i``/``n``) are dead-lettered with the reason by `receive` and `reclaim`
alike: never returned, never looping.

Worker registry. ``publish_worker`` writes one field per worker process into the hash
``workers`` (see `keys`), its value carrying an expiry time taken from the server's
``TIME``; ``live_workers`` prunes expired fields in the same script and returns the
rest. No KEYS or SCAN: one small hash per queue, which itself expires when its
longest-lived entry does.

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
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import msgspec
import redis.asyncio as aioredis

from taskrunner.clock import Clock, SystemClock
from taskrunner.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigurationError,
    QueueClosedError,
    UnsupportedServerError,
)
from taskrunner.queue import (
    CONTRACT_VERSION,
    Added,
    AddRequest,
    BrowsedMessage,
    BrowseState,
    Capabilities,
    ConsumerCleanup,
    ConsumerStats,
    DeadLetter,
    Delivery,
    FireRecord,
    LeaderLease,
    Leadership,
    MessageBrowser,
    MessageLookup,
    MessageState,
    QueueAdmin,
    QueueNameList,
    QueueNames,
    QueueStats,
    Receipt,
    ResultStore,
    ResultWrite,
    Scheduling,
    WorkerInfo,
    WorkerRegistry,
    check_browse,
    check_names_limit,
)
from taskrunner.redaction import mask_secrets, mask_url, url_secrets
from taskrunner_backends.checks import check_count, check_deliveries, check_text, encode_reason

from .client import Arg, RawClient, is_no_script
from .errors import GroupMissingError, translate_errors
from .keys import QueueKeys
from .results import NOTIFY_CAP, ResultListener
from .scripts import SCRIPTS
from .url import split_url

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

_log = logging.getLogger("taskrunner_backends.redis")

# Most PEL entries one `reclaim` call inspects (count); bounds the time
# one script holds the server while still reaching lapsed entries behind live ones.
RECLAIM_SCAN_BUDGET = 2000

# Most due delayed messages one `receive` moves back onto the stream (count).
PROMOTE_BATCH = 100

# Deliveries per fenced script call (count); larger batches are split.
FENCED_BATCH = 500

# How long after a BLOCK expires we still wait for the reply (seconds) before
# declaring the server unavailable.
BLOCK_READ_MARGIN_SECONDS = 5.0

# Longest one blocking read of a `receive` lasts (seconds) before the receive script runs
# again. A message another client releases with a delay while a receive blocks waits in
# the parked stream, where XREADGROUP cannot see it; only the script promotes it. So such
# a message is delivered at most this long after its delay ends, at the cost of one
# script call and one read per this many seconds of an idle receive.
DELAYED_RECHECK_SECONDS = 1.0

# How late (seconds) a delayed message is delivered after its due time, at most, to a
# receive blocked on an idle server (no load): the doorbell wakes the receive at the
# add, the receive blocks until the due time and is unblocked then by CLIENT UNBLOCK
# instead of at the server's next cron tick. Under load, add the server's and the
# caller's own delays; without any receive blocked, the next receive delivers it.
DELAYED_LATENESS_SECONDS = 0.05

# How late a server ends a BLOCK that expired (seconds): it checks timeouts at its cron
# ticks, 1 / hz (hz 10 by default). Blocks that must end on time (a delayed message is
# due about then) are ended by CLIENT UNBLOCK instead.
SERVER_TICK_SECONDS = 0.1

# Requests per `add_requests` script call (count); one round trip carries them all.
ADD_REQUESTS_BATCH = 500

# Results per put/delete script call (count); one round trip carries them all.
RESULTS_BATCH = 500

# Ids per lookup script call (count); one round trip carries them all.
LOOKUP_BATCH = 500

# SCAN calls and keys per call one `queue_names` call makes at most: it examines at most
# their product of keys (of the whole database, every namespace), then says whether it
# saw them all.
NAMES_SCAN_CALLS = 100
NAMES_SCAN_COUNT = 1000

# Socket timeouts (seconds) for clients built by `open_from_url` when the URL sets none;
# redis-py's default is to wait forever for a reply.
DEFAULT_SOCKET_TIMEOUT_SECONDS = 10.0
DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS = 5.0

# Pending entries `stats` inspects for the longest idle time (count).
STATS_PENDING_SAMPLE = 1000

_MINIMUM_VERSIONS = {"redis": (7, 0, 0), "valkey": (7, 2, 0)}

_GONE_REASON = "payload removed from the stream while pending"

_STREAM_ID = re.compile(rb"[0-9]{1,20}-[0-9]{1,20}")
_STREAM_ID_TEXT = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
_LEASE_SUFFIX = re.compile(r"~[0-9]+$")

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
)

_DURABLE_CAPABILITIES = msgspec.structs.replace(_CAPABILITIES, durable_enqueue=True)

#: What the ``durable`` option accepts: "" (off), "replica" (WAIT) or "aof" (WAITAOF).
Durability = Literal["", "replica", "aof"]

# How long a durable add waits for a replica's confirmation (seconds) before it raises.
DURABLE_WAIT_SECONDS = 2.0

# Longest lease or delay the backend represents exactly (ms; Lua numbers are doubles).
_MAX_MS = 2**52


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What `check_server` found.

    Attributes:
        name: ``"redis"`` or ``"valkey"``.
        version: The server's own version (Valkey's, not its Redis compatibility level).
    """

    name: Literal["redis", "valkey"]
    version: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.name.capitalize()} {'.'.join(map(str, self.version))}"


def _parse_version(text: str) -> tuple[int, ...]:
    numbers = []
    for part in text.strip().split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits.group()))
    return tuple(numbers)


def check_server(info: dict[str, str]) -> ServerInfo:
    """Identify the server from its ``INFO server`` fields and check it is new enough.

    Valkey reports ``redis_version:7.2.4`` for compatibility; its own version is in
    ``valkey_version`` (and ``server_name:valkey``), which is what counts for it.

    Raises:
        UnsupportedServerError: Redis older than 7.0, Valkey older than 7.2, or no
            version reported at all.
    """
    name: Literal["redis", "valkey"]
    if "valkey_version" in info or info.get("server_name", "").lower() == "valkey":
        name, raw = "valkey", info.get("valkey_version", info.get("redis_version", ""))
    else:
        name, raw = "redis", info.get("redis_version", "")
    version = _parse_version(raw)
    if not version:
        raise UnsupportedServerError(
            "the server reported no version in INFO server; taskrunner needs "
            "Redis >= 7.0 or Valkey >= 7.2"
        )
    found = ServerInfo(name=name, version=version)
    minimum = _MINIMUM_VERSIONS[name]
    if version < minimum:
        raise UnsupportedServerError(
            f"{found} is too old: taskrunner's Redis Streams backend needs "
            f"{name.capitalize()} >= {'.'.join(map(str, minimum[:2]))} "
            "(skipping of deleted entries by XCLAIM, "
            "consumer-group lag)"
        )
    return found


def _parse_info(raw: bytes) -> dict[str, str]:
    fields = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        if line and not line.startswith("#") and ":" in line:
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    return fields


class _RegistryEntry(msgspec.Struct, frozen=True):
    """A worker-registry value as ``lua/workers.lua`` writes it."""

    expires_ms: int
    info: WorkerInfo


_REGISTRY_DECODER = msgspec.json.Decoder(_RegistryEntry)
_INFO_ENCODER = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class _Message:
    entry_id: str
    body: bytes
    message_id: str
    base_count: int
    unique: bool = False


@dataclass(frozen=True, slots=True)
class _Malformed:
    entry_id: str
    reason: str
    evidence: bytes


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")


def _evidence(pairs: list[tuple[bytes, bytes]]) -> bytes:
    return msgspec.json.encode({"fields": [[_text(n), _text(v)] for n, v in pairs]})


def _parse_entry(entry_id: str, fields: object) -> _Message | _Malformed:
    """Read one stream entry's fields; anything that is not our message is `_Malformed`."""
    if type(fields) is list and len(fields) == 2 and fields[0] == b"b" and type(fields[1]) is bytes:
        # Fast path: what `add` writes, the case for every message not yet released.
        return _Message(entry_id=entry_id, body=fields[1], message_id=entry_id, base_count=0)
    if fields is None or fields is False:
        return _Malformed(entry_id, _GONE_REASON, b"")
    if (
        not isinstance(fields, list)
        or len(fields) % 2
        or not all(isinstance(f, bytes) for f in fields)
    ):
        return _Malformed(entry_id, "malformed stream entry: unreadable field list", b"")
    pairs = list(zip(fields[0::2], fields[1::2], strict=True))
    seen: dict[bytes, bytes] = {}
    for name, value in pairs:
        if name in seen and name in (b"b", b"i", b"n", b"u"):
            return _Malformed(
                entry_id, f"malformed message: field {_text(name)!r} repeated", _evidence(pairs)
            )
        seen[name] = value
    if b"b" not in seen:
        names = ", ".join(sorted({repr(_text(n)) for n, _ in pairs})) or "none"
        return _Malformed(
            entry_id,
            f"not a taskrunner message: no body field 'b' (fields: {names})",
            _evidence(pairs),
        )
    message_id = entry_id
    if b"i" in seen:
        if not _STREAM_ID.fullmatch(seen[b"i"]):
            return _Malformed(
                entry_id, "malformed message: field 'i' is not a stream id", _evidence(pairs)
            )
        message_id = seen[b"i"].decode("ascii")
    base = 0
    if b"n" in seen:
        raw_base = seen[b"n"]
        if not raw_base.isdigit() or len(raw_base) > 18:
            return _Malformed(
                entry_id, "malformed message: field 'n' is not a delivery count", _evidence(pairs)
            )
        base = int(raw_base)
    return _Message(
        entry_id=entry_id,
        body=seen[b"b"],
        message_id=message_id,
        base_count=base,
        unique=b"u" in seen,
    )


def _token(message: _Message | _Malformed, base: int, lease_ms: int) -> str:
    unique = isinstance(message, _Message) and message.unique
    if (
        isinstance(message, _Message)
        and message.entry_id == message.message_id
        and base == 0
        and not unique
    ):
        return str(lease_ms)
    # "u": the message holds a unique key, which its ack must read and free.
    return f"{lease_ms}:{message.entry_id}/{base}{'u' if unique else ''}"


class _Located(NamedTuple):
    entry_id: str
    base: int
    lease_ms: int
    unique: bool


def _locate(delivery: Delivery) -> _Located | None:
    """The stream entry, base delivery count and lease a receipt refers to, if well formed.

    Receipt tokens are ``LEASE_MS`` when the entry is the message's first one and it
    holds no unique key, else ``LEASE_MS:ENTRY_ID/BASE`` (BASE: deliveries before the
    entry was re-added), with ``u`` appended when the message holds a unique key.
    """
    raw_lease, _, rest = delivery.receipt.token.partition(":")
    if not raw_lease.isdigit() or len(raw_lease) > 16:
        return None
    unique = False
    if not rest:
        entry_id, base = delivery.message_id, 0
    else:
        entry_id, _, raw_base = rest.partition("/")
        if raw_base.endswith("u"):
            unique, raw_base = True, raw_base[:-1]
        if not raw_base.isdigit() or len(raw_base) > 18:
            return None
        base = int(raw_base)
    if not _STREAM_ID_TEXT.fullmatch(entry_id):
        return None
    return _Located(entry_id, base, int(raw_lease), unique)


def _holder(consumer: str, lease_ms: int) -> str:
    """The Redis consumer name for `consumer` holding leases of `lease_ms`.

    The lease travels in the name, so the reclaim script judges every pending entry
    by its own holder's lease, and it costs nothing per message or per round trip.
    """
    return f"{consumer}~{lease_ms}"


def _caller_name(holder: str) -> str:
    """The consumer name as callers know it: the holder name without its lease suffix."""
    return _LEASE_SUFFIX.sub("", holder)


def _milliseconds(name: str, seconds: float, *, positive: bool) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {seconds}")
    # Rounded up: a lease or delay is never shorter than asked for.
    return min(_MAX_MS, math.ceil(seconds * 1000))


def _check_consumer(consumer: str) -> None:
    if not isinstance(consumer, str):
        raise TypeError(f"consumer must be a str, not {type(consumer).__name__}")
    if not consumer:
        raise ValueError("consumer must be a non-empty string")


def _as_int(value: object) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, bytes):
        return int(value)
    raise BackendError(f"unexpected reply element {value!r}")


def _as_str(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, str):
        return value
    raise BackendError(f"unexpected reply element {value!r}")


def _stream_entries(reply: object, bell: bytes = b"") -> tuple[list[tuple[str, object]], list[str]]:
    """(id, fields) pairs of an XREADGROUP reply in RESP2 (list) or RESP3 (map) form.

    Entries of the stream named `bell` (the doorbell) are returned apart, as ids.
    """
    if not reply:
        return [], []
    if isinstance(reply, dict):
        streams: Iterable[tuple[object, object]] = reply.items()
    elif isinstance(reply, list):
        streams = ((item[0], item[1]) for item in reply)
    else:
        raise BackendError(f"unexpected XREADGROUP reply {reply!r:.100}")
    entries = []
    rings = []
    for name, stream_entries in streams:
        for entry in stream_entries or ():  # type: ignore[attr-defined]
            if name == bell:
                rings.append(_as_str(entry[0]))
            else:
                entries.append((_as_str(entry[0]), entry[1]))
    return entries, rings


def _ready_count(lag: int, length: int, pending: int) -> int:
    # Without a lag (tombstones after the group's cursor) every stream entry that is not
    # pending is ready; acked entries are deleted, so the stream holds nothing else.
    return min(lag, length) if lag >= 0 else max(0, length - pending)


def _describe_client(client: aioredis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


class RedisStreamsQueue:
    """A `taskrunner.queue.Queue` on Redis Streams, with every optional part.

    It is its own `QueueAdmin`, `WorkerRegistry`, `ConsumerCleanup`, `Scheduling`,
    `Leadership` and `ResultStore`; its `lookup` part is a small object of its own.

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
        # A shard of a partitioned queue gets its cluster slot's client.
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
        # Whether this handle created (or found) the group: a later NOGROUP means it
        # was deleted underneath, which is worth a warning; a first one is not.
        self._group_created = False
        self._blocking: set[asyncio.Task[Any]] = set()
        self._cancelled_by_close: set[asyncio.Task[Any]] = set()
        # Built lazily: it holds asyncio objects, which belong to the running loop.
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
        return _DURABLE_CAPABILITIES if self._durable else _CAPABILITIES

    @property
    def admin(self) -> QueueAdmin:
        """This queue: dead letters, purge and delete are implemented."""
        return self

    @property
    def worker_registry(self) -> WorkerRegistry:
        """This queue: worker entries live in one hash per queue."""
        return self

    @property
    def consumer_cleanup(self) -> ConsumerCleanup:
        """This queue: consumers holding nothing can be deleted from the group."""
        return self

    @property
    def scheduling(self) -> Scheduling:
        """This queue: delayed adds, unique adds and cancel (see `add_requests`)."""
        return self

    @property
    def leadership(self) -> Leadership:
        """This queue: leader leases and fire records live in two hashes per queue."""
        return self

    @property
    def results(self) -> ResultStore:
        """This queue: results are string keys with PX in the queue's slot (`put_results`)."""
        return self

    @property
    def lookup(self) -> MessageLookup:
        """The state of a message by id, read from this queue's records (`lookup_messages`).

        A small object of its own: the part's method is also named ``lookup``.
        """
        return _Lookup(self)

    @property
    def queue_names(self) -> QueueNames:
        """The queues of this namespace, found by a bounded SCAN (`list_queue_names`)."""
        return _Names(self)

    @property
    def browse(self) -> MessageBrowser:
        """A read-only page of waiting or in-flight messages (`browse_messages`).

        A small object of its own: the part's method is also named ``browse``.
        """
        return _Browser(self)

    @property
    def keys(self) -> QueueKeys:
        """The Redis keys of this queue."""
        return self._keys

    @property
    def server(self) -> ServerInfo | None:
        """The server found by `initialize`, None before it ran."""
        return self._server

    @property
    def has_xackdel(self) -> bool:
        """Whether the server has XACKDEL (found by `initialize`)."""
        return self._has_xackdel

    # -- lifecycle ---------------------------------------------------------------------

    async def initialize(self) -> None:
        """Check the server, detect optional commands, load the scripts; idempotent.

        Nothing is created here: the stream appears with the first `add`, the consumer
        group with the first `receive` or `reclaim` (at id 0, so a backlog added
        before it is delivered). Opening a queue only to inspect it leaves no key.

        Raises:
            UnsupportedServerError: Redis older than 7.0 or Valkey older than 7.2.
            ConfigurationError: ``durable="aof"`` on a server without WAITAOF.
            BackendUnavailableError: The server could not be reached; the next call
                tries again.
            QueueClosedError: The queue was closed.
        """
        self._check_open()
        async with self._init_lock:
            if self._initialized:
                return
            raw_info = await self._raw.call("INFO server", "INFO", "server")
            self._server = check_server(_parse_info(raw_info))
            self._has_xackdel = await self._supports("XACKDEL")
            if self._durable == "aof" and not await self._supports("WAITAOF"):
                raise ConfigurationError(
                    f"durable=aof needs WAITAOF, which {self._server} does not have "
                    "(Redis or Valkey >= 7.2); use durable=replica (WAIT) instead",
                    setting="durable",
                )
            # Loading up front keeps the first real calls at one round trip each.
            await self._raw.pipeline(
                "SCRIPT LOAD", [("SCRIPT", "LOAD", s.source) for s in SCRIPTS.values()]
            )
            self._initialized = True
            _log.debug("opened %r on %s (XACKDEL: %s)", self, self._server, self._has_xackdel)

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

    # -- the contract ------------------------------------------------------------------

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        """Enqueue bodies with one pipelined XADD each (one round trip).

        Returns:
            The stream entry ids, in order.

        Raises:
            TypeError: A body is not `bytes`.
            BackendUnavailableError: The server could not be reached; some bodies may
                have been added.
        """
        for body in bodies:
            if not isinstance(body, bytes):
                raise TypeError(f"message body must be bytes, not {type(body).__name__}")
        await self._ready()
        if not bodies:
            return []
        commands: list[tuple[Arg, ...]] = [
            ("XADD", self._keys.stream, "*", "b", body) for body in bodies
        ]
        replies = await self._raw.pipeline("add", [*commands, *self._durability()])
        self._check_durable("add", replies[len(commands) :])
        ids = []
        for reply in replies[: len(commands)]:
            if isinstance(reply, Exception):
                with translate_errors("add"):
                    raise reply
            ids.append(_as_str(reply))
        return ids

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        """Lease up to `max_messages` new messages to `consumer`, waiting up to `wait_seconds`.

        Due released messages are moved back onto the stream first. Entries that are
        not taskrunner messages are dead-lettered with the reason, never returned.
        Cancelling a waiting receive may leave entries leased to `consumer` that
        only `reclaim` will find (``cancel_safe_receive`` is False). The leases are
        held by the group consumer ``<consumer>~<lease ms>``.

        Raises:
            ValueError: `max_messages` < 1, `wait_seconds` < 0, `lease_seconds` <= 0,
                or a duration that is not finite.
            BackendUnavailableError: The server could not be reached.
            QueueClosedError: The queue is or became closed.
        """
        return await self.receive_until(
            consumer,
            max_messages=max_messages,
            wait_seconds=wait_seconds,
            lease_seconds=lease_seconds,
            stop=None,
        )

    async def receive_until(
        self,
        consumer: str,
        *,
        max_messages: int,
        wait_seconds: float,
        lease_seconds: float,
        stop: asyncio.Event | None,
    ) -> list[Delivery]:
        """`receive`, returning early (possibly empty-handed) once `stop` is set.

        A blocked read is ended by ``CLIENT UNBLOCK`` when `stop` is set, so nothing is
        leased that the caller does not get (a cancellation could lose the reply); where
        ACLs forbid ``CLIENT`` the read ends at its block (at most
        `DELAYED_RECHECK_SECONDS`). A partitioned queue blocks on several shards and
        stops the others once one delivered.
        """
        check_count("max_messages", max_messages)
        _check_consumer(consumer)
        _milliseconds("wait_seconds", wait_seconds, positive=False)
        lease_ms = _milliseconds("lease_seconds", lease_seconds, positive=True)
        await self._ready()
        holder = _holder(consumer, lease_ms)
        deadline = self._clock.monotonic() + wait_seconds
        rings: list[str] = []
        # Whether a doorbell woke this receive: it then answers for the earlier due time
        # the ring announced, and hands it on if it returns before that (see `_hand_on`).
        woken = False
        while True:
            next_due_ms, entries = await self._receive_now(holder, max_messages, rings)
            rings = []
            if entries:
                deliveries = await self._accept(consumer, lease_ms, entries)
                if deliveries:
                    return await self._hand_on(deliveries, woken, next_due_ms, rings)
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                return await self._hand_on([], woken, next_due_ms, rings)
            # Never block past the next due time known now (+1 ms: BLOCK rounds down), nor
            # long enough to miss one released by another client during the block.
            block = min(remaining, DELAYED_RECHECK_SECONDS)
            if next_due_ms >= 0:
                block = min(block, (next_due_ms + 1) / 1000)
            # The server ends an expired BLOCK only at its next cron tick: when a message
            # is due about when this block ends, end it on time (the next block, or the
            # caller's next receive, then delivers it on time too).
            unblock = 0 <= next_due_ms <= (block + SERVER_TICK_SECONDS) * 1000
            if stop is not None and stop.is_set():
                return await self._hand_on([], woken, next_due_ms, rings)
            entries, rings = await self._blocking_read(
                holder, max_messages, block, unblock=unblock, stop=stop
            )
            # Entries read after aclose stay leased until reclaimed; the caller is gone.
            self._check_open()
            if entries:
                deliveries = await self._accept(consumer, lease_ms, entries)
                if deliveries:
                    return await self._hand_on(deliveries, woken, next_due_ms, rings)
            elif rings:
                # Rung: a message is due earlier than this read knew. The script acks
                # the ring and computes the shorter block.
                woken = True
            elif block >= remaining or (stop is not None and stop.is_set()):
                return await self._hand_on([], woken, next_due_ms, rings)

    async def _receive_now(
        self, holder: str, max_messages: int, rings: list[str]
    ) -> tuple[int, list[tuple[str, object]]]:
        """Promote due messages and lease new entries without blocking, in one round trip.

        Returns the ms until the next delayed message is due (-1: none) and the entries.
        The promotion script goes first in the same write, so what it promotes is read.
        """
        keys = self._keys.scheduling
        prepare_args: tuple[Arg, ...] = (self._keys.group, PROMOTE_BATCH, *rings)
        read: tuple[Arg, ...] = (
            "XREADGROUP",
            "GROUP",
            self._keys.group,
            holder,
            "COUNT",
            max_messages,
            "STREAMS",
            self._keys.stream,
            ">",
        )
        prepare: tuple[Arg, ...] = ("EVALSHA", SCRIPTS["receive"].sha, len(keys), *keys)
        due, reply = await self._raw.pipeline("receive", [(*prepare, *prepare_args), read])
        if isinstance(reply, Exception):
            if not str(reply).startswith("NOGROUP"):
                with translate_errors("receive"):
                    raise reply
            # First use of the queue by a worker, or the group was deleted: create it at 0.
            self._group_missing("receive")
            await self._create_group()
            reply = await self._raw.call("receive", *read)
        entries, _ = _stream_entries(reply)
        if isinstance(due, Exception):
            if not (is_no_script(due) or str(due).startswith("NOGROUP")):
                with translate_errors("receive"):
                    raise due
            # Not loaded (a restart, SCRIPT FLUSH) or the bell's group is gone: run it
            # again through the path that loads it and recreates groups. The entries
            # read meanwhile are leased already and are returned all the same.
            due = await self._script("receive", "receive", keys, prepare_args)
        return _as_int(due), entries

    async def _hand_on(
        self, deliveries: list[Delivery], woken: bool, next_due_ms: int, rings: list[str]
    ) -> list[Delivery]:
        """Settle the doorbell before `receive` returns `deliveries`.

        Rings read by the last blocking read are acked and deleted. A receive woken by
        a ring may be the only reader that knows of an early due time; when it returns
        empty-handed while a message is due within `DELAYED_RECHECK_SECONDS`, it rings
        again so another blocked receive takes over (one round trip, only in that case).
        One that returns messages does not: its caller comes back for more (a saturated
        caller may not, and other readers then recheck within that time), and under load
        receives that ring each other on every return would double the round trips.
        """
        commands: list[tuple[Arg, ...]] = []
        if rings:
            commands.append(("XACK", self._keys.bell, self._keys.group, *rings))
            commands.append(("XDEL", self._keys.bell, *rings))
        if woken and not deliveries and 0 <= next_due_ms < DELAYED_RECHECK_SECONDS * 1000:
            commands.append(("XADD", self._keys.bell, "MAXLEN", "~", 64, "*", "r", "1"))
        if commands:
            try:
                await self._raw.pipeline("receive", commands)
            except BackendError as exc:
                # The deliveries are leased already; losing them for this would be worse
                # than a ring left behind (remove_consumers clears it) or a later wake.
                _log.warning("%r: could not settle the doorbell: %s", self, exc)
        return deliveries

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Reset the idle time of each delivery still owned under its receipt.

        Returns:
            The deliveries whose lease was already lost; they are left untouched.
        """
        return await self._fenced("heartbeat", deliveries, "")

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Complete and delete each delivery still owned under its receipt.

        An owned message whose stream entry was deleted underneath (trimming, a stray
        XDEL) counts as completed: its lease was current and nothing is left to redo.

        Returns:
            The deliveries not completed by this call (lease lost, already completed).
        """
        return await self._fenced("ack", deliveries, "")

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        """Re-add owned deliveries, ready at once or after `delay_seconds` (server clock).

        Returns:
            The deliveries whose lease was already lost; they are left untouched.

        Raises:
            ValueError: `delay_seconds` < 0 or not finite.
        """
        delay_ms = _milliseconds("delay_seconds", delay_seconds, positive=False)
        return await self._fenced("release", deliveries, delay_ms)

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        """Lease to `consumer` messages idle for longer than their holder's own lease.

        One script scans up to `RECLAIM_SCAN_BUDGET` pending entries from where the
        previous call of this handle stopped, reads each holder's lease from its
        consumer name and claims the lapsed entries. A holder whose name carries no
        lease (not written by this backend) is judged by `lease_seconds`.

        Raises:
            ValueError: `lease_seconds` <= 0 or not finite, or `max_messages` < 1.
        """
        lease_ms = _milliseconds("lease_seconds", lease_seconds, positive=True)
        check_count("max_messages", max_messages)
        _check_consumer(consumer)
        await self._ready()
        reply = await self._script(
            "reclaim",
            "reclaim",
            self._keys.scheduling,
            (
                self._keys.group,
                _holder(consumer, lease_ms),
                lease_ms,
                max_messages,
                self._reclaim_cursor,
                RECLAIM_SCAN_BUDGET,
            ),
        )
        self._reclaim_cursor = _as_str(reply[0])
        gone = _as_int(reply[1])
        if gone:
            _log.warning(
                "%r: %d pending message(s) lost their payload; recorded as dead letters",
                self,
                gone,
            )
        deliveries = []
        malformed = []
        for i in range(2, len(reply), 3):
            entry_id, pel_count = _as_str(reply[i]), _as_int(reply[i + 1])
            parsed = _parse_entry(entry_id, reply[i + 2])
            if isinstance(parsed, _Message):
                deliveries.append(self._delivery(consumer, lease_ms, parsed, pel_count))
            else:
                malformed.append((parsed, pel_count))
        await self._bury_malformed(consumer, lease_ms, malformed)
        return deliveries

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        """Atomically move owned deliveries to the dead-letter stream and delete them.

        Returns:
            The deliveries whose lease was already lost; they are left untouched.
        """
        encode_reason(reason)
        return await self._fenced("dead", deliveries, reason)

    async def stats(self) -> QueueStats:
        """A snapshot taken in one script: counts, ages (server clock) and consumers.

        ``ready`` counts entries not yet delivered (the group's lag; when the server
        cannot compute it, stream length minus pending) and released messages whose
        delay is over but that no receive has moved back yet (delayed adds alike);
        ``delayed`` the released messages and delayed adds still waiting for their due
        time. Doorbell rings are no messages and count nowhere.
        ``oldest_in_flight_age_seconds`` is the longest idle time among the
        `STATS_PENDING_SAMPLE` oldest pending entries. A consumer's
        ``idle_seconds`` is the time since its last successful interaction where the
        server reports it (Redis and Valkey >= 7.2), else since its last attempt.
        """
        await self._ready()
        r = await self._script(
            "stats", "stats", self._keys.all, (self._keys.group, STATS_PENDING_SAMPLE, "all")
        )
        lag, length, pending, dead, delayed, now_ms = (_as_int(v) for v in r[:6])
        oldest_ready_id, max_idle_ms = _as_str(r[6]), _as_int(r[7])
        # Released messages whose delay is over but that no receive has promoted yet.
        due, first_due_ms = _as_int(r[8]), _as_int(r[9])
        ready = _ready_count(lag, length, pending) + due
        ready_since = []
        if oldest_ready_id:
            ready_since.append(int(oldest_ready_id.split("-")[0]))
        if first_due_ms >= 0:
            ready_since.append(first_due_ms)
        oldest_ready_age = None
        if ready_since:
            oldest_ready_age = max(0, now_ms - min(ready_since)) / 1000
        # One caller-visible consumer may hold leases of several lengths (one group
        # consumer each): report it once, with the sum of pending and the least idle.
        consumers: dict[str, ConsumerStats] = {}
        count = _as_int(r[10])
        for i in range(11, 11 + 4 * count, 4):
            idle_ms, inactive_ms = _as_int(r[i + 2]), _as_int(r[i + 3])
            name = _caller_name(_as_str(r[i]))
            pending_here = _as_int(r[i + 1])
            idle = (inactive_ms if inactive_ms >= 0 else idle_ms) / 1000
            seen = consumers.get(name)
            if seen is not None:
                pending_here += seen.pending
                idle = min(idle, seen.idle_seconds if seen.idle_seconds is not None else idle)
            consumers[name] = ConsumerStats(name=name, pending=pending_here, idle_seconds=idle)
        return QueueStats(
            ready=ready,
            delayed=delayed,
            in_flight=pending,
            dead=dead,
            oldest_ready_age_seconds=oldest_ready_age,
            oldest_in_flight_age_seconds=None if max_idle_ms < 0 else max_idle_ms / 1000,
            consumers=tuple(consumers[name] for name in sorted(consumers)),
        )

    async def len(self) -> int:
        """Ready, delayed and in-flight messages, counted as `stats` counts them."""
        await self._ready()
        r = await self._script("len", "stats", self._keys.all, (self._keys.group, 0, "counts"))
        lag, length, pending, _, delayed = (_as_int(v) for v in r[:5])
        return _ready_count(lag, length, pending) + delayed + pending

    # -- Scheduling -----------------------------------------------------------------------

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        """Add each request's body with its options; one `Added` per request, in order.

        One script per `ADD_REQUESTS_BATCH` requests, all sent in one round trip. Each
        request's unique check and add are atomic. A request without a delay (or due in
        the past) becomes a plain stream entry, as `add` writes it; a delayed one waits
        in the parked stream under an id reserved from the queue stream (so ids never
        collide) and is ready at its due time on the server's clock (``due_at`` and
        ``delay_seconds`` are both converted on the server, in whole milliseconds
        rounded up). A receive blocked meanwhile is woken by the doorbell and delivers
        it at most `DELAYED_LATENESS_SECONDS` late on an idle server. A unique key is a
        key of the queue's slot holding the message id, with ``PX`` when
        ``unique_seconds`` is set (0 holds it not at all).

        Raises:
            TypeError: A request is not an `AddRequest`, or a field has the wrong type.
            ValueError: A duration is negative or not finite, or a unique key is empty
                or not valid UTF-8; nothing is added.
            BackendUnavailableError: The server could not be reached; some of the
                requests may have been added.
        """
        if isinstance(requests, AddRequest):
            raise TypeError("requests must be a sequence of AddRequest, not a single one")
        encoded = [_encode_request(request) for request in requests]
        await self._ready()
        if not encoded:
            return []
        commands: list[tuple[Arg, ...]] = []
        keys = self._keys.scheduling
        for start in range(0, len(encoded), ADD_REQUESTS_BATCH):
            args: list[Arg] = [self._keys.group, self._keys.unique_prefix]
            for item in encoded[start : start + ADD_REQUESTS_BATCH]:
                args.extend(item)
            commands.append(("EVALSHA", SCRIPTS["add_requests"].sha, len(keys), *keys, *args))
        wait = self._durability()
        replies = await self._raw.pipeline("add requests", [*commands, *wait])
        waited, replies = replies[len(commands) :], replies[: len(commands)]
        if any(is_no_script(reply) for reply in replies):
            # The server restarted or SCRIPT FLUSH ran: nothing of those calls ran.
            await self._raw.call("add requests", "SCRIPT", "LOAD", SCRIPTS["add_requests"].source)
            again = [i for i, reply in enumerate(replies) if is_no_script(reply)]
            rerun = await self._raw.pipeline("add requests", [*(commands[i] for i in again), *wait])
            waited = rerun[len(again) :]
            for i, reply in zip(again, rerun, strict=True):
                replies[i] = reply
        self._check_durable("add requests", waited)
        added = []
        for reply in replies:
            if isinstance(reply, Exception):
                with translate_errors("add requests"):
                    raise reply
            for i in range(0, len(reply), 2):
                added.append(Added(message_id=_as_str(reply[i]), added=_as_int(reply[i + 1]) == 1))
        return added

    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        """Remove ready or delayed messages so they are never delivered; free their keys.

        A ready message is one no receive has read yet (newer than the group's last
        delivered entry); a delayed one waits in the parked stream (delayed adds and
        releases with a delay alike, found through the ``moved`` map). Each removal and
        its key's release happen in one script, so a cancel racing a receive either
        removes the message or finds it delivered, never both.

        Returns:
            One flag per id: True when removed by this call; False when in flight,
            completed, dead, cancelled already, unknown or not an id of this backend.

        Raises:
            TypeError: `message_ids` is a single string.
        """
        if isinstance(message_ids, str):
            raise TypeError("message_ids must be a sequence of ids, not a single string")
        ids = list(message_ids)
        await self._ready()
        flags = [False] * len(ids)
        valid = [(index, i) for index, i in enumerate(ids) if _is_stream_id(i)]
        for start in range(0, len(valid), FENCED_BATCH):
            chunk = valid[start : start + FENCED_BATCH]
            reply = await self._raw.run_script(
                "cancel",
                SCRIPTS["cancel"],
                self._keys.scheduling,
                (self._keys.group, self._keys.unique_prefix, *(i for _, i in chunk)),
            )
            for (index, _), flag in zip(chunk, reply, strict=True):
                flags[index] = _as_int(flag) == 1
        return flags

    # -- Leadership -----------------------------------------------------------------------

    async def acquire_leadership(
        self, name: str, holder: str, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Take the lease of election `name` for `holder` when it is free or lapsed.

        A live lease of `holder` is renewed with its token. A new lease gets the
        election's previous token + 1 (the record of the last token outlives leases,
        so tokens never repeat). Expiry is on the server's clock, in ms rounded up.

        Raises:
            TypeError: A name is no str, or `ttl_seconds` no number.
            ValueError: `ttl_seconds` <= 0 or not finite, or `name`/`holder` empty.
        """
        check_text("name", name)
        check_text("holder", holder)
        ttl_ms = _milliseconds("ttl_seconds", ttl_seconds, positive=True)
        return _lease(name, await self._leadership("acquire", name, holder, ttl_ms))

    async def renew_leadership(
        self, name: str, holder: str, token: int, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Extend the lease by `ttl_seconds` from now if `holder` holds it under `token`.

        A lapsed lease renews as long as nobody took it since (the token is still the
        election's latest and the record still names `holder`).
        """
        check_text("name", name)
        check_text("holder", holder)
        _check_token(token)
        ttl_ms = _milliseconds("ttl_seconds", ttl_seconds, positive=True)
        return _lease(name, await self._leadership("renew", name, holder, token, ttl_ms))

    async def resign_leadership(self, name: str, holder: str, token: int) -> bool:
        """End the lease now if `holder` holds it under `token`; returns whether it did.

        The token stays the election's latest (the next holder gets a larger one);
        the lease can no longer be renewed or resigned.
        """
        check_text("name", name)
        check_text("holder", holder)
        _check_token(token)
        return _as_int(await self._leadership("resign", name, holder, token)) == 1

    async def current_leader(self, name: str) -> LeaderLease | None:
        """The live lease of election `name`, or None when nobody holds one."""
        check_text("name", name)
        return _lease(name, await self._leadership("current", name))

    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        """Add `body` for `schedule`'s `instant` and record it fired, in one script.

        Nothing is added unless `token` is the election's latest token and `instant`
        is later than the schedule's recorded one. The message is a plain ready entry,
        as `add` writes it.
        """
        check_text("election", election)
        check_text("schedule", schedule)
        _check_token(token)
        if not isinstance(body, bytes):
            raise TypeError(f"message body must be bytes, not {type(body).__name__}")
        if isinstance(instant, bool) or not isinstance(instant, int | float):
            raise TypeError(f"instant must be a number, not {type(instant).__name__}")
        if not math.isfinite(instant):
            raise ValueError(f"instant must be finite, got {instant}")
        reply = await self._leadership(
            "fire", election, token, schedule, repr(float(instant)), body
        )
        return None if reply is None else _as_str(reply)

    async def fire_records(self, schedules: Sequence[str]) -> dict[str, FireRecord]:
        """The latest fire record of each named schedule that has one."""
        if isinstance(schedules, str):
            raise TypeError("schedules must be a sequence of names, not a single string")
        names = list(dict.fromkeys(schedules))
        for name in names:
            check_text("schedule", name)
        if not names:
            self._check_open()
            return {}
        reply = await self._leadership("records", *names)
        records = {}
        for name, value in zip(names, reply, strict=True):
            if value is None:
                continue
            instant, _, message_id = _as_str(value).partition(" ")
            records[name] = FireRecord(schedule=name, instant=float(instant), message_id=message_id)
        return records

    async def _leadership(self, op: str, *args: Arg) -> Any:
        await self._ready()
        return await self._raw.run_script(
            f"leadership {op}",
            SCRIPTS["leadership"],
            (self._keys.leaders, self._keys.fired, self._keys.stream),
            (op, *args),
        )

    # -- ResultStore ----------------------------------------------------------------------

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        """Store each result under its message id for its TTL (server clock, ms rounded up).

        One round trip per call: one script per `RESULTS_BATCH` results, all sent in
        one write. Each result is ``SET <prefix>r:<id> <body> PX <ttl>`` (a later
        write of an id, in this batch or after, replaces the body and restarts the
        TTL), an entry in the ``results`` index (so delete_queue finds it) and one
        XADD per script naming the ids on the ``done`` stream, which wakes waiters.
        Ids are stored as given, whatever their text: the key's hash tag is the
        queue's, always.

        Raises:
            TypeError: `results` is a single `ResultWrite`, an item is not one, a
                message id is no str, a body is not `bytes` or a TTL no number.
            ValueError: A TTL is <= 0 or not finite, or a message id is empty or not
                encodable as UTF-8; nothing is sent.
            BackendUnavailableError: The server could not be reached; some of the
                results may have been stored.
        """
        items = self.check_results(results)
        await self._ready()
        if not items:
            return
        keys = self._keys
        calls = []
        for start in range(0, len(items), RESULTS_BATCH):
            chunk = items[start : start + RESULTS_BATCH]
            call_keys = [keys.results, keys.done, *(keys.result(i) for i, _, _ in chunk)]
            args: list[Arg] = ["put", NOTIFY_CAP]
            for item in chunk:
                args.extend(item)
            calls.append((call_keys, args))
        await self._batched("put results", "results", calls)

    def check_results(self, results: Sequence[ResultWrite]) -> list[tuple[str, int, bytes]]:
        """What `put_results` would send: (id, TTL ms, body) each; raises as it does."""
        if isinstance(results, ResultWrite):
            raise TypeError("results must be a sequence of ResultWrite, not a single one")
        items: list[tuple[str, int, bytes]] = []
        for write in results:
            if not isinstance(write, ResultWrite):
                raise TypeError(f"expected ResultWrite, got {type(write).__name__}")
            check_text("message_id", write.message_id)
            if not isinstance(write.body, bytes):
                raise TypeError(f"result body must be bytes, not {type(write.body).__name__}")
            ttl_ms = _milliseconds("ttl_seconds", write.ttl_seconds, positive=True)
            items.append((write.message_id, ttl_ms, write.body))
        return items

    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        """The stored body of each id, in order; None where there is none or it expired.

        One MGET (one round trip) whatever the number of ids. An id that could never
        have been stored (empty, not encodable) is None without being sent.

        Raises:
            TypeError: `message_ids` is a single string, or holds something else.
        """
        ids = _result_ids(message_ids)
        await self._ready()
        sendable = [i for i in ids if i is not None]
        if not sendable:
            return [None] * len(ids)
        reply = await self._raw.call("get results", "MGET", *map(self._keys.result, sendable))
        found = iter(reply)
        bodies: list[bytes | None] = []
        for i in ids:
            body = None if i is None else next(found)
            bodies.append(body if isinstance(body, bytes) else None)
        return bodies

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        """The body of `message_id`'s result, waiting up to `timeout_seconds` for it.

        Returns at once when it is stored (one GET). Otherwise the wait registers with the
        handle's one result listener (a task reading the ``done`` stream with a
        blocking XREAD; see `taskrunner_backends.redis.results`), which wakes it when a
        put names the id: no polling, and any number of concurrent waits of one handle
        share one blocking connection (plus at most
        `~taskrunner_backends.redis.results.CHECK_CONCURRENCY` for their first look at
        the key). The timeout runs on the event loop's clock; on an idle server a
        result stored meanwhile is returned within a few milliseconds.

        Returns:
            The body, or None when none was stored by the timeout (never before it).

        Raises:
            TypeError: `message_id` is no str or `timeout_seconds` no number.
            ValueError: `timeout_seconds` < 0 or not finite, or `message_id` empty.
            QueueClosedError: The queue is or became closed while waiting.
            BackendUnavailableError: The server could not be reached for the first
                look at the key (the listener itself retries until the timeout).
        """
        check_text("message_id", message_id)
        _milliseconds("timeout_seconds", timeout_seconds, positive=False)
        await self._ready()
        key = self._keys.result(message_id)
        if timeout_seconds == 0:
            body = await self._raw.call("wait result", "GET", key)
            return body if isinstance(body, bytes) else None
        # initialize() may have awaited the server while aclose ran.
        self._check_open()
        if self._listener is None:
            self._listener = ResultListener(
                self, f"taskrunner-results:{self._keys.namespace}:{self._keys.queue_name}"
            )
        return await self._listener.wait(message_id, key, timeout_seconds)

    async def delete_results(self, message_ids: Sequence[str]) -> int:
        """Delete the results of `message_ids`; returns how many existed.

        One round trip (a script per `RESULTS_BATCH` ids). A duplicated id counts once.

        Raises:
            TypeError: `message_ids` is a single string, or holds something else.
        """
        ids = [i for i in _result_ids(message_ids) if i is not None]
        await self._ready()
        if not ids:
            return 0
        keys = self._keys
        calls: list[tuple[Sequence[str], Sequence[Arg]]] = []
        for start in range(0, len(ids), RESULTS_BATCH):
            chunk = ids[start : start + RESULTS_BATCH]
            args: list[Arg] = ["delete", 0, *chunk]
            calls.append(([keys.results, keys.done, *map(keys.result, chunk)], args))
        replies = await self._batched("delete results", "results", calls)
        return sum(_as_int(reply) for reply in replies)

    @property
    def result_listener(self) -> ResultListener | None:
        """The handle's result listener, once a `wait_result` has needed one (for tests)."""
        return self._listener

    # -- MessageLookup (through `lookup`) -------------------------------------------------

    async def lookup_messages(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        """The state of each id, in order, read in one script per `LOOKUP_BATCH` ids.

        All scripts go in one round trip. Nothing is written. A message is found where
        the backend keeps it anyway: its stream entry (``running`` while it is in the
        group's PEL, with the holder, idle time and delivery count from XPENDING;
        ``ready`` otherwise), or, after a release or a delayed add, the entry the
        ``moved`` map names (``delayed`` until its due time, with ``due_at``;
        ``ready`` once due), or, after dead-lettering, the dead letter that the
        ``dead_ids`` index names for its original id (``dead``, with reason, time,
        body and delivery count). ``added_at`` is the time in the message id (the
        server's clock when it was added; for a delayed add, when it was requested).
        The body is returned in every state. Acked, cancelled, purged, retried (it has
        a new id) and unknown messages are None, and so is every id that is not a
        stream id.

        Raises:
            TypeError: `message_ids` is a single string.
        """
        if isinstance(message_ids, str):
            raise TypeError("message_ids must be a sequence of ids, not a single string")
        ids = list(message_ids)
        await self._ready()
        states: list[MessageState | None] = [None] * len(ids)
        valid = [(index, i) for index, i in enumerate(ids) if _is_stream_id(i)]
        if not valid:
            return states
        keys = self._keys
        script_keys = [
            keys.stream,
            keys.dead,
            keys.delayed,
            keys.parked,
            keys.moved,
            keys.dead_ids,
        ]
        chunks = [
            valid[start : start + LOOKUP_BATCH] for start in range(0, len(valid), LOOKUP_BATCH)
        ]
        calls = [(script_keys, [keys.group, *(i for _, i in chunk)]) for chunk in chunks]
        replies = await self._batched("lookup", "lookup", calls)
        for chunk, reply in zip(chunks, replies, strict=True):
            for n, (index, message_id) in enumerate(chunk):
                states[index] = _message_state(message_id, reply[8 * n : 8 * n + 8])
        return states

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        """Up to `limit` messages in `state` after cursor `after`, in stream-entry order.

        One script, one round trip, nothing written (no group is created, no idle time
        reset). The cursor is the stream entry id: a released message is a new entry at
        the end of the stream, so it is listed there, under its own message id, with
        the deliveries it had. Waiting: the entries after the group's last-delivered id
        (all of them before any receive); a released message whose delay is over is
        listed once a receive moved it back onto the stream (`stats` counts it ready
        before). In flight: the group's PEL from the cursor, with the holder, idle time
        and lease from its group consumer name, the delivery count its entry's base
        plus the PEL's. An entry that is not a taskrunner message is listed with its
        fields as JSON for a body (receive dead-letters it); one whose payload was
        deleted while pending with an empty body.

        Raises:
            ValueError: See `taskrunner.queue.MessageBrowser.browse`; `after` must be a
                stream id (``<ms>-<seq>``).
        """
        check_browse(state, limit)
        if after is not None and not _is_stream_id(after):
            raise ValueError(f"after must be a stream entry id (ms-seq), got {after!r:.60}")
        await self._ready()
        reply = await self._raw.run_script(
            "browse",
            SCRIPTS["browse"],
            [self._keys.stream],
            [self._keys.group, state, after or "", limit],
        )
        page = []
        for i in range(0, len(reply), 5):
            entry_id = _as_str(reply[i])
            parsed = _parse_entry(entry_id, reply[i + 1])
            if isinstance(parsed, _Message):
                message_id, body, base = parsed.message_id, parsed.body, parsed.base_count
            else:
                message_id, body, base = entry_id, parsed.evidence, 0
            holder = reply[i + 2]
            consumer = lease = idle = None
            count = base
            if isinstance(holder, bytes):
                name = _as_str(holder)
                consumer = _caller_name(name)
                suffix = _LEASE_SUFFIX.search(name)
                lease = None if suffix is None else int(suffix.group()[1:]) / 1000
                idle = _as_int(reply[i + 3]) / 1000
                count = base + _as_int(reply[i + 4])
            page.append(
                BrowsedMessage(
                    cursor=entry_id,
                    message_id=message_id,
                    body=body,
                    delivery_count=count,
                    added_at=int(message_id.partition("-")[0]) / 1000,
                    consumer=consumer,
                    idle_seconds=idle,
                    lease_seconds=lease,
                )
            )
        return page

    async def list_queue_names(
        self, *, after: str | None = None, limit: int = 1000
    ) -> QueueNameList:
        """The queues of this handle's namespace that have a stream or a dead-letter key.

        A SCAN with MATCH over ``<namespace>:{*}:[sd][te][ra]*`` (the ``stream`` and
        ``dead`` keys), at most `NAMES_SCAN_CALLS` calls of `NAMES_SCAN_COUNT` keys
        each; SCAN walks the whole database, so ``complete`` is False when the scan
        stopped before its end (a database of more than about 100,000 keys) or more
        than `limit` names follow `after`. Shards of partitioned queues (tags with
        ``#``) are left out. A queue whose messages were all acked keeps its stream
        key, so it is listed until deleted. Nothing is written.

        Raises:
            ValueError: `limit` is below 1 or above `taskrunner.queue.QUEUE_NAMES_LIMIT`.
        """
        check_names_limit(limit)
        await self._ready()
        head = f"{self._keys.namespace}:{{"
        pattern = head + "*}:[sd][te][ra]*"
        found: set[str] = set()
        cursor: bytes | str = "0"
        calls = 0
        while True:
            reply = await self._raw.call(
                "queue names", "SCAN", cursor, "MATCH", pattern, "COUNT", NAMES_SCAN_COUNT
            )
            cursor, keys = reply[0], reply[1]
            calls += 1
            for raw in keys:
                key = _as_str(raw)
                tag, _, rest = key[len(head) :].partition("}")
                if rest in (":stream", ":dead") and "#" not in tag and tag:
                    found.add(tag)
            if cursor in (b"0", "0") or calls >= NAMES_SCAN_CALLS:
                break
        names = sorted(n for n in found if after is None or n > after)
        done = cursor in (b"0", "0")
        return QueueNameList(names=tuple(names[:limit]), complete=done and len(names) <= limit)

    async def _batched(
        self, action: str, name: str, calls: Sequence[tuple[Sequence[str], Sequence[Arg]]]
    ) -> list[Any]:
        """Run script `name` once per (keys, args) in one round trip; the replies, in order.

        Raises the first error reply (translated) after reloading a forgotten script.
        """
        script = SCRIPTS[name]
        commands = [("EVALSHA", script.sha, len(k), *k, *a) for k, a in calls]
        replies = await self._raw.pipeline(action, commands)
        if any(is_no_script(reply) for reply in replies):
            # The server restarted or SCRIPT FLUSH ran: nothing of those calls ran.
            await self._raw.call(action, "SCRIPT", "LOAD", script.source)
            again = [i for i, reply in enumerate(replies) if is_no_script(reply)]
            rerun = await self._raw.pipeline(action, [commands[i] for i in again])
            for i, reply in zip(again, rerun, strict=True):
                replies[i] = reply
        for reply in replies:
            if isinstance(reply, Exception):
                with translate_errors(action):
                    raise reply
        return replies

    # -- QueueAdmin -----------------------------------------------------------------------

    async def list_dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        """The oldest `limit` dead letters, oldest first."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        await self._ready()
        if limit == 0:
            return []
        reply = await self._raw.call(
            "list dead letters", "XRANGE", self._keys.dead, "-", "+", "COUNT", limit
        )
        letters = []
        for entry in reply or ():
            fields = entry[1] or []
            values = dict(zip(fields[0::2], fields[1::2], strict=True))
            letters.append(
                DeadLetter(
                    message_id=_as_str(entry[0]),
                    original_id=_text(values.get(b"o", b"")),
                    body=values.get(b"b", b""),
                    reason=_text(values.get(b"r", b"")),
                    delivery_count=int(values.get(b"c", b"0") or 0),
                    dead_at=_stamp_seconds(values.get(b"t", b"0")),
                )
            )
        return letters

    async def retry_dead_letters(self, message_ids: Sequence[str] | None = None) -> list[str]:
        """Put dead letters back as new messages (all when `message_ids` is None).

        Each one is added and removed from the dead-letter stream in one script, so it
        is neither lost nor duplicated. Unknown ids are skipped.

        Returns:
            The new message ids, one per dead letter moved.
        """
        await self._ready()
        keys = (self._keys.stream, self._keys.dead, self._keys.dead_ids)
        if message_ids is not None:
            ids = self._valid_ids(message_ids)
            moved: list[str] = []
            for start in range(0, len(ids), FENCED_BATCH):
                reply = await self._script(
                    "retry", "retry_dead", keys, (0, "+", *ids[start : start + FENCED_BATCH])
                )
                moved.extend(_as_str(v) for v in reply)
            return moved
        # Only what is dead now: messages that die again while this runs wait for the
        # next retry instead of keeping this one going round forever.
        newest = await self._raw.call("retry", "XREVRANGE", self._keys.dead, "+", "-", "COUNT", 1)
        if not newest:
            return []
        last = _as_str(newest[0][0])
        moved = []
        while True:
            reply = await self._script("retry", "retry_dead", keys, (FENCED_BATCH, last))
            moved.extend(_as_str(v) for v in reply)
            if len(reply) < FENCED_BATCH:
                return moved

    async def purge_dead_letters(self, message_ids: Sequence[str] | None = None) -> int:
        """Delete dead letters (all when `message_ids` is None); returns how many."""
        await self._ready()
        keys = (self._keys.dead, self._keys.dead_ids)
        if message_ids is None:
            return _as_int(await self._script("purge dead", "purge_dead", keys, ()))
        ids = self._valid_ids(message_ids)
        deleted = 0
        for start in range(0, len(ids), FENCED_BATCH):
            chunk = ids[start : start + FENCED_BATCH]
            deleted += _as_int(await self._script("purge dead", "purge_dead", keys, chunk))
        return deleted

    async def purge(self) -> int:
        """Delete every ready, delayed and in-flight message; returns how many.

        Receipts of purged messages report lost from then on; dead letters stay, and so
        do stored results (they expire by their TTL, or go with `delete_queue`).
        """
        await self._ready()
        return _as_int(
            await self._script(
                "purge",
                "purge",
                self._keys.scheduling,
                (self._keys.group, self._keys.unique_prefix),
            )
        )

    async def delete_queue(self) -> None:
        """Delete every key of the queue: messages, dead letters, consumers, worker entries.

        Stored results and the result notification stream go too (the ``results``
        index lists the result keys, so no SCAN is needed).

        One DEL of keys in one slot: atomic. Workers still running recreate an empty
        group at their next receive. Stream ids are time-based, so a receipt issued
        before the delete does not match a message added after it, with one exception:
        the new stream starts its ids afresh, so a message added in the same
        millisecond of the server's clock as the last one deleted can get that
        message's id back (and an old receipt of the same consumer, first delivery,
        would fit it). Do not delete a queue that workers are still using.
        """
        await self._ready()
        await self._raw.run_script(
            "delete queue",
            SCRIPTS["delete_queue"],
            self._keys.every_key,
            (self._keys.unique_prefix, self._keys.result_prefix),
        )

    async def remove_idle_consumers(self, idle_seconds: float) -> list[str]:
        """Delete consumers that own no pending message and were inactive for `idle_seconds`.

        The pending check and the delete run in one script, so a consumer that owns
        a message is never deleted (deleting it would make its messages unclaimable).

        Returns:
            The names of the deleted consumers, as callers know them.

        Raises:
            ValueError: `idle_seconds` < 0 or not finite.
        """
        idle_ms = _milliseconds("idle_seconds", idle_seconds, positive=False)
        return await self._remove_consumers("remove idle consumers", idle_ms, ())

    async def remove_consumers(self, names: Sequence[str]) -> list[str]:
        """Delete the named consumers (all their lease lengths) that own no pending message.

        Returns:
            The names removed, as callers know them; unknown names are skipped.

        Raises:
            TypeError: `names` is a single string or holds something else.
        """
        if isinstance(names, str):
            raise TypeError("names must be a sequence of consumer names, not a single string")
        for name in names:
            _check_consumer(name)
        if not names:
            # Nothing to remove, but a closed queue still says so.
            self._check_open()
            return []
        return await self._remove_consumers("remove consumers", 0, names)

    async def _remove_consumers(self, action: str, idle_ms: int, names: Sequence[str]) -> list[str]:
        await self._ready()
        reply = await self._raw.run_script(
            action,
            SCRIPTS["remove_idle_consumers"],
            (self._keys.stream, self._keys.bell),
            (self._keys.group, idle_ms, *names),
        )
        return list(dict.fromkeys(_caller_name(_as_str(name)) for name in reply))

    # -- WorkerRegistry -------------------------------------------------------------------

    async def publish_worker(self, info: WorkerInfo, *, ttl_seconds: float) -> None:
        """Create or refresh `info.instance`'s entry, listed for `ttl_seconds` from now.

        The expiry is computed on the server's clock. Expired entries of other
        instances are pruned in the same script.

        Raises:
            TypeError: `info` is not a `WorkerInfo`.
            ValueError: `ttl_seconds` <= 0 or the instance name is empty.
        """
        if not isinstance(info, WorkerInfo):
            raise TypeError(f"info must be a WorkerInfo, not {type(info).__name__}")
        if not ttl_seconds > 0:
            raise ValueError(f"ttl_seconds must be > 0, got {ttl_seconds}")
        _check_consumer(info.instance)
        await self._ready()
        await self._raw.run_script(
            "publish worker",
            SCRIPTS["workers"],
            (self._keys.workers,),
            ("publish", info.instance, math.ceil(ttl_seconds * 1000), _INFO_ENCODER.encode(info)),
        )

    async def remove_worker(self, instance: str) -> None:
        """Remove `instance`'s entry (at shutdown); idempotent."""
        _check_consumer(instance)
        await self._ready()
        await self._raw.call("remove worker", "HDEL", self._keys.workers, instance)

    async def live_workers(self) -> list[WorkerInfo]:
        """Entries refreshed within their TTL (server clock); expired ones are pruned.

        An entry that cannot be decoded (written by something else) is skipped.
        """
        await self._ready()
        reply = await self._raw.run_script(
            "list workers", SCRIPTS["workers"], (self._keys.workers,), ("live",)
        )
        workers = []
        for value in reply or ():
            try:
                workers.append(_REGISTRY_DECODER.decode(value).info)
            except (msgspec.DecodeError, TypeError):
                _log.warning("%r: skipping an unreadable worker registry entry", self)
        return workers

    # -- internals ------------------------------------------------------------------------

    def _durability(self) -> list[tuple[Arg, ...]]:
        """The command that waits for a replica, sent after an add on the same connection."""
        timeout_ms = round(DURABLE_WAIT_SECONDS * 1000)
        if self._durable == "replica":
            return [("WAIT", 1, timeout_ms)]
        if self._durable == "aof":
            return [("WAITAOF", 0, 1, timeout_ms)]
        return []

    def _check_durable(self, action: str, replies: list[Any]) -> None:
        if not replies:
            return
        (reply,) = replies
        if isinstance(reply, Exception):
            with translate_errors(action):
                raise reply
        confirmed = _as_int(reply[1]) if isinstance(reply, list) else _as_int(reply)
        if confirmed < 1:
            kind = "written to its AOF" if self._durable == "aof" else "received"
            raise BackendUnavailableError(
                f"{action}: no replica {kind} the messages within {DURABLE_WAIT_SECONDS:g}s "
                "(durable enqueue); they are on the master and may or may not survive a "
                "failover: adding them again may duplicate them"
            )

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError(f"{self!r} was closed")

    async def _ready(self) -> None:
        self._check_open()
        if not self._initialized:
            await self.initialize()

    async def _supports(self, command: str) -> bool:
        try:
            reply = await self._raw.call("COMMAND INFO", "COMMAND", "INFO", command)
        except BackendUnavailableError:
            raise
        except BackendError:
            # COMMAND may be renamed or forbidden by ACL; assume the baseline.
            return False
        return bool(reply) and reply[0] is not None

    def _group_missing(self, action: str) -> None:
        if self._group_created:
            _log.warning("%r: consumer group missing during %s; recreating it", self, action)
        else:
            _log.debug("%r: creating the consumer group (first %s)", self, action)

    async def _create_group(self) -> None:
        keys = self._keys
        # At 0, never $: $ would skip every message added before the group existed. The
        # doorbell's group goes with it (a ring from before only wakes one read early).
        replies = await self._raw.pipeline(
            "create group",
            [
                ("XGROUP", "CREATE", keys.stream, keys.group, "0", "MKSTREAM"),
                ("XGROUP", "CREATE", keys.bell, keys.group, "0", "MKSTREAM"),
            ],
        )
        for reply in replies:
            if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
                with translate_errors("create group"):
                    raise reply
        self._group_created = True

    async def _script(
        self, action: str, name: str, keys: Sequence[str], args: Sequence[Arg]
    ) -> Any:
        try:
            return await self._raw.run_script(action, SCRIPTS[name], keys, args)
        except GroupMissingError:
            # First use of the queue by a worker, or the stream or group was deleted
            # (FLUSHDB, DEL, eviction): create it at 0.
            self._group_missing(action)
            await self._create_group()
            try:
                return await self._raw.run_script(action, SCRIPTS[name], keys, args)
            except GroupMissingError as exc:
                raise BackendError(f"{action}: consumer group keeps disappearing") from exc

    async def _blocking_read(
        self,
        consumer: str,
        max_messages: int,
        block_seconds: float,
        *,
        unblock: bool = False,
        stop: asyncio.Event | None = None,
    ) -> tuple[list[tuple[str, object]], list[str]]:
        """One XREADGROUP BLOCK on the stream and the doorbell: (entries, ring ids).

        With `unblock`, the read is ended by CLIENT UNBLOCK at `block_seconds` instead
        of at the server's next cron tick after its BLOCK expired (up to 100 ms later);
        with `stop`, also when `stop` is set.
        """
        block_ms = max(1, math.ceil(block_seconds * 1000))  # BLOCK 0 would wait forever
        command: tuple[Arg, ...] = (
            "XREADGROUP",
            "GROUP",
            self._keys.group,
            consumer,
            "COUNT",
            max_messages,
            "BLOCK",
            block_ms,
            "STREAMS",
            self._keys.stream,
            self._keys.bell,
            ">",
            ">",
        )
        bell = self._keys.bell.encode()
        task = asyncio.current_task()
        if task is not None:
            self._blocking.add(task)
        try:
            for attempt in (1, 2):
                try:
                    read_timeout = block_ms / 1000 + BLOCK_READ_MARGIN_SECONDS
                    if unblock or stop is not None:
                        reply = await self._raw.call_unblocked_after(
                            "receive",
                            command,
                            read_timeout=read_timeout,
                            unblock_after=block_ms / 1000 if unblock else None,
                            stop=stop,
                        )
                    else:
                        reply = await self._raw.call("receive", *command, read_timeout=read_timeout)
                except GroupMissingError:
                    # Since 7.0, deleting the stream unblocks readers with NOGROUP.
                    if attempt == 2:
                        raise
                    self._group_missing("receive")
                    await self._create_group()
                    continue
                return _stream_entries(reply, bell)
            return [], []
        except asyncio.CancelledError:
            if task is not None and task in self._cancelled_by_close and task.cancelling() <= 1:
                task.uncancel()
                raise QueueClosedError(f"{self!r} was closed while receiving") from None
            raise
        except BackendError as exc:
            if self._closed:
                raise QueueClosedError(f"{self!r} was closed while receiving") from exc
            raise
        finally:
            if task is not None:
                self._blocking.discard(task)
                self._cancelled_by_close.discard(task)

    def _delivery(
        self, consumer: str, lease_ms: int, message: _Message, pel_count: int
    ) -> Delivery:
        count = message.base_count + pel_count
        return Delivery(
            message_id=message.message_id,
            body=message.body,
            delivery_count=count,
            receipt=Receipt(
                consumer=consumer,
                delivery_count=count,
                token=_token(message, message.base_count, lease_ms),
            ),
        )

    async def _accept(
        self, consumer: str, lease_ms: int, entries: list[tuple[str, object]]
    ) -> list[Delivery]:
        """Turn freshly read entries (delivery count 1) into deliveries; bury the rest."""
        deliveries = []
        malformed = []
        for entry_id, fields in entries:
            parsed = _parse_entry(entry_id, fields)
            if isinstance(parsed, _Message):
                deliveries.append(self._delivery(consumer, lease_ms, parsed, 1))
            else:
                malformed.append((parsed, 1))
        await self._bury_malformed(consumer, lease_ms, malformed)
        return deliveries

    async def _bury_malformed(
        self, consumer: str, lease_ms: int, malformed: list[tuple[_Malformed, int]]
    ) -> None:
        if not malformed:
            return
        by_reason: dict[str, list[tuple[Delivery, bytes]]] = {}
        for entry, pel_count in malformed:
            delivery = Delivery(
                message_id=entry.entry_id,
                body=entry.evidence,
                delivery_count=pel_count,
                receipt=Receipt(
                    consumer=consumer,
                    delivery_count=pel_count,
                    token=_token(entry, 0, lease_ms),
                ),
            )
            by_reason.setdefault(entry.reason, []).append((delivery, entry.evidence))
        for reason, items in by_reason.items():
            _log.warning(
                "%r: dead-lettering %d entr%s: %s",
                self,
                len(items),
                "y" if len(items) == 1 else "ies",
                reason,
            )
            try:
                await self._fenced(
                    "dead", [d for d, _ in items], reason, overrides=[e for _, e in items]
                )
            except BackendError as exc:
                # They stay leased to `consumer`; reclaim will find and bury them later.
                # Raising instead would lose the valid deliveries of this same read.
                _log.warning("%r: could not dead-letter malformed entries yet: %s", self, exc)

    async def _fenced(
        self,
        op: str,
        deliveries: Sequence[Delivery],
        arg: Arg,
        *,
        overrides: Sequence[bytes] | None = None,
    ) -> list[Delivery]:
        check_deliveries(deliveries)
        await self._ready()
        lost: list[Delivery] = []
        items: list[tuple[Delivery, tuple[Arg, ...]]] = []
        for index, delivery in enumerate(deliveries):
            located = _locate(delivery)
            receipt = delivery.receipt
            pel_count = None if located is None else receipt.delivery_count - located.base
            if located is None or pel_count is None or pel_count < 1:
                lost.append(delivery)  # a receipt we never issued cannot hold a lease
                continue
            if overrides is not None:
                override = b"=" + overrides[index]
            else:
                override = b"u" if located.unique else b""
            items.append(
                (
                    delivery,
                    (
                        located.entry_id,
                        _holder(receipt.consumer, located.lease_ms),
                        pel_count,
                        delivery.message_id,
                        receipt.delivery_count,
                        override,
                    ),
                )
            )
        flag = "1" if self._has_xackdel else "0"
        for start in range(0, len(items), FENCED_BATCH):
            chunk = items[start : start + FENCED_BATCH]
            args: list[Arg] = [op, self._keys.group, arg, flag, self._keys.unique_prefix]
            for _, item_args in chunk:
                args.extend(item_args)
            statuses = await self._raw.run_script(
                op, SCRIPTS["fenced"], self._keys.scheduling, args
            )
            for (delivery, _), status in zip(chunk, statuses, strict=True):
                if _as_int(status) != 1:
                    lost.append(delivery)
        if len(lost) > 1:
            order = {id(d): i for i, d in enumerate(deliveries)}
            lost.sort(key=lambda d: order[id(d)])
        return lost

    def _valid_ids(self, message_ids: Sequence[str]) -> list[str]:
        if isinstance(message_ids, str):
            raise TypeError("message_ids must be a sequence of ids, not a single string")
        return [i for i in message_ids if _is_stream_id(i)]


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


def _stamp_seconds(raw: bytes) -> float:
    """A dead letter's time field (ms, with a fraction since 0.x; older: whole ms) in s."""
    try:
        return float(raw or b"0") / 1000
    except ValueError:
        return 0.0


def _check_token(token: int) -> None:
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"token must be an int, not {type(token).__name__}")
    if not 0 <= token < _MAX_MS:
        raise ValueError(f"token must be >= 0 and < 2**52, got {token}")


def _lease(name: str, reply: object) -> LeaderLease | None:
    if not reply:
        return None
    assert isinstance(reply, list)
    return LeaderLease(
        name=name,
        holder=_as_str(reply[0]),
        token=_as_int(reply[1]),
        remaining_seconds=max(0, _as_int(reply[2])) / 1000,
    )


def _encode_request(request: AddRequest) -> tuple[Arg, Arg, Arg, Arg, Arg]:
    """The five script arguments of one request, after checking every field."""
    if not isinstance(request, AddRequest):
        raise TypeError(f"expected AddRequest, got {type(request).__name__}")
    if not isinstance(request.body, bytes):
        raise TypeError(f"message body must be bytes, not {type(request.body).__name__}")
    mode: str = "r"
    value: Arg = ""
    delay_ms = _milliseconds("delay_seconds", request.delay_seconds, positive=False)
    if request.due_at is not None:
        due_at = request.due_at
        if isinstance(due_at, bool) or not isinstance(due_at, int | float):
            raise TypeError(f"due_at must be a number of seconds, not {type(due_at).__name__}")
        if not math.isfinite(due_at):
            raise ValueError(f"due_at must be finite, got {due_at}")
        # Converted to ms on the server (its clock decides what is past).
        mode, value = "a", repr(float(due_at))
    elif delay_ms > 0:
        mode, value = "d", delay_ms
    key: Arg = ""
    unique_ms: Arg = ""
    if request.unique_key is not None:
        check_text("unique_key", request.unique_key)
        key = request.unique_key
    if request.unique_seconds is not None:
        unique_ms = _milliseconds("unique_seconds", request.unique_seconds, positive=False)
    return (mode, value, key, unique_ms, request.body)


def _result_ids(message_ids: Sequence[str]) -> list[str | None]:
    """`message_ids` with None for each id no result can be stored under."""
    if isinstance(message_ids, str):
        raise TypeError("message_ids must be a sequence of ids, not a single string")
    ids: list[str | None] = []
    for message_id in message_ids:
        if not isinstance(message_id, str):
            raise TypeError(f"message ids must be str, not {type(message_id).__name__}")
        try:
            message_id.encode("utf-8")
        except UnicodeEncodeError:
            ids.append(None)
            continue
        ids.append(message_id or None)
    return ids


_MAX_ID_PART = 2**64 - 1


def _is_stream_id(value: object) -> bool:
    """Whether `value` is a stream id in the server's own spelling (both parts < 2**64).

    Only the canonical spelling: the server reads ``01-1`` as ``1-1``, so a
    leading zero would make another text alias the message.
    """
    if not isinstance(value, str) or not _STREAM_ID_TEXT.fullmatch(value):
        return False
    ms, _, seq = value.partition("-")
    return (
        int(ms) <= _MAX_ID_PART
        and int(seq) <= _MAX_ID_PART
        and str(int(ms)) == ms
        and str(int(seq)) == seq
    )


def _message_state(message_id: str, row: Sequence[Any]) -> MessageState | None:
    """One row of ``lua/lookup.lua``'s reply as a `MessageState`."""
    state, count, body, consumer, idle_ms, due_ms, reason, dead_ms = row
    if state is None:
        return None
    name = _as_str(state)
    added_at = int(message_id.partition("-")[0]) / 1000
    common: dict[str, Any] = {
        "message_id": message_id,
        "delivery_count": _as_int(count),
        "body": body if isinstance(body, bytes) else None,
        "added_at": added_at,
    }
    if name == "running":
        return MessageState(
            state="running",
            consumer=_caller_name(_as_str(consumer)),
            idle_seconds=_as_int(idle_ms) / 1000,
            **common,
        )
    if name == "delayed":
        return MessageState(state="delayed", due_at=_as_int(due_ms) / 1000, **common)
    if name == "dead":
        return MessageState(
            state="dead",
            dead_reason=_as_str(reason),
            dead_at=_as_int(dead_ms) / 1000,
            **common,
        )
    if name == "ready":
        return MessageState(state="ready", **common)
    raise BackendError(f"unexpected lookup state {name!r}")


class _Names:
    """`QueueNames` of a `RedisStreamsQueue` (see `RedisStreamsQueue.list_queue_names`)."""

    __slots__ = ("_queue",)

    def __init__(self, queue: RedisStreamsQueue) -> None:
        self._queue = queue

    async def queue_names(self, *, after: str | None = None, limit: int = 1000) -> QueueNameList:
        """See `RedisStreamsQueue.list_queue_names`."""
        return await self._queue.list_queue_names(after=after, limit=limit)


class _Browser:
    """`MessageBrowser` of a `RedisStreamsQueue` (see `RedisStreamsQueue.browse_messages`)."""

    __slots__ = ("_queue",)

    def __init__(self, queue: RedisStreamsQueue) -> None:
        self._queue = queue

    async def browse(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        """See `RedisStreamsQueue.browse_messages`."""
        return await self._queue.browse_messages(state, after=after, limit=limit)


class _Lookup:
    """`MessageLookup` of a `RedisStreamsQueue` (see `RedisStreamsQueue.lookup_messages`)."""

    __slots__ = ("_queue",)

    def __init__(self, queue: RedisStreamsQueue) -> None:
        self._queue = queue

    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        """The state of each id, in order; None where the queue holds no such message."""
        return await self._queue.lookup_messages(message_ids)
