"""The state a memory store holds, and the handle base every part of the queue builds on.

`_Store` is the data (one per ``memory://NAME`` and queue, shared by its handles);
`_Handle` is what every part (`queue`, `scheduling`, `leadership`, `results`, `browse`)
needs from one handle: the store, the closed flag, and the moves of a message between
the store's structures that more than one part makes.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from taskrunner.clock import Clock
from taskrunner.errors import QueueClosedError
from taskrunner.queue import DeadLetter, FireRecord, Flow, WorkerInfo

from .flow import _FlowGate
from .ready import _Ready

# Expired results each ResultStore call sweeps at most (beyond the writes it makes), so
# a backlog costs no single call more than this many heap pops.
_SWEEP_PER_CALL = 256


# The expiry heap is rebuilt from the live entries once it holds more than twice as
# many entries as there are results plus this slack (stale entries of overwrites).
_HEAP_SLACK = 1024


# Fencing tokens are Python ints here; the bound is PostgreSQL's bigint, so a token
# another backend could not hold is refused here too.
_TOKEN_BITS = 63


@dataclass(slots=True)
class _Message:
    id: str
    body: bytes
    added_at: float
    state: Literal["ready", "delayed", "in_flight"] = "ready"
    delivery_count: int = 0
    owner: str = ""
    # Monotonic time of the last delivery or heartbeat; idle time is measured from it.
    touched_at: float = 0.0
    # The lease its holder was granted; it lapses once idle for longer.
    lease_seconds: float = 0.0
    # The unique key this message was added with, freed at its final outcome.
    unique_key: str | None = None
    # Monotonic time a delayed message falls due (meaningful while state is "delayed").
    due: float = 0.0
    # Flow control: the message's flow, whether it waits in its key's deque (state is
    # "ready" then, but it is not in `ready`), and whether it holds a slot of its key.
    flow: Flow | None = None
    waiting: bool = False
    admitted: bool = False
    priority: int = 0


@dataclass(slots=True)
class _Election:
    holder: str
    token: int
    # Monotonic time the lease lapses at.
    expiry: float


@dataclass(slots=True)
class _Store:
    clock: Clock
    requires_heartbeat: bool
    messages: dict[str, _Message] = field(default_factory=dict)
    ready: _Ready = field(default_factory=_Ready)
    # (due monotonic time, sequence, message id) of released messages not yet due.
    delayed: list[tuple[float, int, str]] = field(default_factory=list)
    # Entries of `ready` and `delayed` whose message was cancelled: left in place (removal
    # from the middle is O(n)), skipped when reached and subtracted from the counts.
    cancelled_ready: int = 0
    cancelled_delayed: int = 0
    in_flight: dict[str, _Message] = field(default_factory=dict)
    dead: dict[str, DeadLetter] = field(default_factory=dict)
    # original message id -> dead-letter id, so lookup finds a dead letter in O(1).
    dead_by_original: dict[str, str] = field(default_factory=dict)
    # dead-letter id -> (flow, priority) its message had, so a retry keeps them.
    dead_options: dict[str, tuple[Flow | None, int]] = field(default_factory=dict)
    consumers_seen: dict[str, float] = field(default_factory=dict)
    # instance -> (entry, monotonic expiry)
    workers: dict[str, tuple[WorkerInfo, float]] = field(default_factory=dict)
    sequence: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    # unique key -> (message id holding it, monotonic expiry or None)
    unique: dict[str, tuple[str, float | None]] = field(default_factory=dict)
    elections: dict[str, _Election] = field(default_factory=dict)
    # Latest token issued per election; survives resignations so tokens never repeat.
    tokens: dict[str, int] = field(default_factory=dict)
    fired: dict[str, FireRecord] = field(default_factory=dict)
    # message id -> (result body, monotonic expiry)
    results: dict[str, tuple[bytes, float]] = field(default_factory=dict)
    # (monotonic expiry, message id) per write; entries of overwritten results go stale
    # and are skipped when popped.
    result_expiries: list[tuple[float, str]] = field(default_factory=list)
    # message id -> {future of a waiting wait_result: the handle it waits through}
    result_waiters: dict[str, dict[asyncio.Future[None], _Handle]] = field(default_factory=dict)
    flow: _FlowGate[_Message] = field(default_factory=_FlowGate)
    # Replaced by a fresh event each time it is set, so every waiter of one
    # generation wakes once.
    arrival: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        self.arrival.set()
        self.arrival = asyncio.Event()


# Stores opened by URL (key: ``NAME/queue``), so a producer and a worker in one process
# share a queue.
_NAMED_STORES: dict[str, _Store] = {}


class _Handle:
    """One handle on a `_Store`: the base of `InMemoryQueue` and of its parts."""

    _store: _Store
    _closed: bool
    # The ``memory://NAME/`` a handle was opened through, for `queue_names`.
    _url_prefix: str | None

    if TYPE_CHECKING:
        # `InMemoryQueue.add`: the parts that add (fire) go through it, as a subclass
        # overriding it expects.
        async def add(self, bodies: Sequence[bytes]) -> list[str]: ...

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosedError("this InMemoryQueue handle was closed")

    def _pop_dead(self, dead_id: str) -> DeadLetter:
        store = self._store
        letter = store.dead.pop(dead_id)
        store.dead_options.pop(dead_id, None)
        if store.dead_by_original.get(letter.original_id) == dead_id:
            del store.dead_by_original[letter.original_id]
        return letter

    def _promote_due(self, now: float) -> None:
        store = self._store
        while store.delayed and store.delayed[0][0] <= now:
            _, _, message_id = heapq.heappop(store.delayed)
            message = store.messages.get(message_id)
            if message is None:
                store.cancelled_delayed -= 1
            if message is not None and message.state == "delayed":
                self._make_ready(message, now)

    def _make_ready(self, message: _Message, now: float) -> None:
        # A message with a flow waits for admission instead of joining `ready`.
        message.state = "ready"
        if message.flow is None:
            self._store.ready.append(message.id, message.priority, now)
        else:
            self._store.flow.wait(message)

    def _forget(self, message: _Message) -> None:
        del self._store.in_flight[message.id]
        del self._store.messages[message.id]
        self._free_key(message)
        self._free_slot(message)

    def _free_slot(self, message: _Message) -> None:
        if self._store.flow.free(message):
            self._store.notify()  # a receive waiting on the key's slot may admit now

    def _free_key(self, message: _Message) -> None:
        # Only while the key still names this message: after it expired, another
        # message may hold it.
        key = message.unique_key
        if key is not None and self._store.unique.get(key, ("",))[0] == message.id:
            del self._store.unique[key]

    def _park(self, message_id: str, due: float) -> None:
        store = self._store
        store.messages[message_id].due = due
        heapq.heappush(store.delayed, (due, next(store.sequence), message_id))
