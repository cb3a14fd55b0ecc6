"""What the dashboard shows, gathered through the Queue contract only.

Cost rule: one refresh of the overview calls `Queue.stats` once (and the worker
registry's `live_workers` once) for each queue *on the page shown*, never for the
others; with 1,000 queues a page of `PAGE_SIZE` costs `PAGE_SIZE` stats calls.
"""

from __future__ import annotations

import asyncio
import base64
import math
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from taskrunner.clock import Clock, SystemClock
from taskrunner.codec import decode_envelope
from taskrunner.dashboard.preview import envelope_start
from taskrunner.errors import BackendError, DecodeError
from taskrunner.queue import (
    BrowsedMessage,
    DeadLetter,
    Queue,
    QueueNameList,
    QueueStats,
    WorkerInfo,
    names_of,
)
from taskrunner.tuning import predicted_wait

__all__ = [
    "DEAD_LETTERS_SHOWN",
    "MAX_OPEN",
    "MESSAGES_SHOWN",
    "NAMES_EVERY_SECONDS",
    "NAMES_SHOWN",
    "PAGE_SIZE",
    "WORKERS_SHOWN",
    "DeadLetterView",
    "MessageView",
    "QueueRow",
    "QueueSet",
    "UnknownQueueError",
    "Sampler",
    "WorkerRow",
    "dead_letter_view",
    "message_view",
    "page_bounds",
]

# Queues per overview page: only these are stat'ed on a refresh.
PAGE_SIZE = 50
# Queue handles kept open at once: four pages' worth.
MAX_OPEN = 4 * PAGE_SIZE
# Workers listed per page of the overview.
WORKERS_SHOWN = 100
# Dead letters read per queue page: the admin API lists the oldest N, never all.
DEAD_LETTERS_SHOWN = 100
# Messages per page of a queue page's waiting and in-flight lists (the API allows more,
# up to taskrunner.queue.BROWSE_LIMIT).
MESSAGES_SHOWN = 50
# Characters of a payload's JSON text a message list shows; the rest is cut.
PAYLOAD_PREVIEW = 200
# Queue names read from a backend that can list them (taskrunner.queue.QUEUE_NAMES_LIMIT),
# and how often the list is read again.
NAMES_SHOWN = 10_000
NAMES_EVERY_SECONDS = 30.0
# Throughput samples kept: 15 minutes at one sample per 2-second refresh.
SAMPLE_WINDOW_SECONDS = 15 * 60

Opener = Callable[[str], Awaitable[Queue]]


def page_bounds(total: int, page: int, size: int) -> tuple[int, int, int]:
    """(start, stop, last page) of 1-based `page` of `total` items; pages past the end clamp."""
    pages = max(1, math.ceil(total / size))
    page = min(max(page, 1), pages)
    start = (page - 1) * size
    return start, min(start + size, total), pages


class UnknownQueueError(LookupError):
    """A queue name that is not one of the dashboard's queues."""


class QueueSet:
    """The queues the dashboard shows, opened on first use and kept open, up to a cap.

    Each open handle may hold connections of its own (a Redis client per queue), so at
    most `max_open` stay open: opening one more closes the least recently used. A
    request still using an evicted handle sees its queue's error once (the next
    refresh reopens it); with the default cap of four pages that takes more than
    four tabs on different pages.

    Args:
        names: Queue names, shown in this order (duplicates dropped).
        opener: Opens one queue by name (``backends.connect`` bound to the URL).
        max_open: Most handles open at once (>= 1).
    """

    def __init__(self, names: Sequence[str], opener: Opener, *, max_open: int = MAX_OPEN) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be >= 1, got {max_open}")
        self.names = list(dict.fromkeys(names))
        self._opener = opener
        self._max_open = max_open
        self._open: OrderedDict[str, Queue] = OrderedDict()
        self._lock = asyncio.Lock()

    def __contains__(self, name: object) -> bool:
        return name in self.names

    async def discover(self, probe: str, *, limit: int = NAMES_SHOWN) -> QueueNameList | None:
        """Replace the names by the backend's own list of queues, when it can give one.

        The backend is asked through a handle of queue `probe` (opened, and kept open,
        like the others; on memory this opens that queue's store). Up to `limit` names,
        in the backend's order. Returns the list read, or None (names unchanged) when
        the backend cannot list its queues (`taskrunner.queue.names_of` is None).

        Raises:
            BackendError: The backend could not be reached.
        """
        queue = await self._handle(probe)
        part = names_of(queue)
        if part is None:
            return None
        listing = await part.queue_names(limit=limit)
        self.names = list(dict.fromkeys(listing.names))
        return listing

    async def get(self, name: str) -> Queue:
        """The open handle of `name` (opened on first use).

        Raises:
            UnknownQueueError: `name` is not one of the dashboard's queues.
            BackendError: The backend could not be reached to open it.
        """
        if name not in self.names:
            raise UnknownQueueError(name)
        return await self._handle(name)

    async def _handle(self, name: str) -> Queue:
        async with self._lock:
            queue = self._open.get(name)
            if queue is not None:
                self._open.move_to_end(name)
                return queue
            while len(self._open) >= self._max_open:
                _, oldest = self._open.popitem(last=False)
                await oldest.aclose()
            queue = self._open[name] = await self._opener(name)
            return queue

    @property
    def open_names(self) -> list[str]:
        """Names of the open handles, least recently used first."""
        return list(self._open)

    async def aclose(self) -> None:
        """Close every handle opened; idempotent."""
        opened, self._open = list(self._open.values()), OrderedDict()
        for queue in opened:
            await queue.aclose()


class WorkerRow(msgspec.Struct, frozen=True, kw_only=True):
    """One live worker process of one queue."""

    queue: str
    instance: str
    workers: int
    busy: int
    average_seconds: float | None
    seen_seconds_ago: float
    succeeded: int | None = None
    failed: int | None = None


class QueueRow(msgspec.Struct, frozen=True, kw_only=True):
    """One queue on the overview: its counts, ages and predicted wait.

    ``error`` is set (and the counts are zero) when the backend failed for this queue;
    the other queues of the page are still shown.
    """

    name: str
    ready: int = 0
    delayed: int = 0
    in_flight: int = 0
    dead: int = 0
    oldest_ready_age_seconds: float | None = None
    oldest_in_flight_age_seconds: float | None = None
    predicted_wait_seconds: float | None = None
    workers: int | None = None
    busy: int | None = None
    average_seconds: float | None = None
    error: str | None = None


def _average(workers: Sequence[WorkerInfo]) -> float | None:
    timed = [(w.average_seconds, w.workers) for w in workers if w.average_seconds is not None]
    weight = sum(n for _, n in timed)
    return sum(s * n for s, n in timed) / weight if weight else None


async def queue_row(
    name: str, queue: Queue, now: float
) -> tuple[QueueRow, list[WorkerRow], QueueStats | None]:
    """One stats call (and one live_workers call) for `queue`; a backend error is shown.

    Returns the row, the live workers and the stats read (None after an error).
    """
    try:
        stats = await queue.stats()
        registry = queue.worker_registry
        live = None if registry is None else await registry.live_workers()
    except BackendError as exc:
        return QueueRow(name=name, error=f"{type(exc).__name__}: {exc}"), [], None
    workers = None if live is None else sum(w.workers for w in live)
    average = None if live is None else _average(live)
    row = QueueRow(
        name=name,
        ready=stats.ready,
        delayed=stats.delayed,
        in_flight=stats.in_flight,
        dead=stats.dead,
        oldest_ready_age_seconds=stats.oldest_ready_age_seconds,
        oldest_in_flight_age_seconds=stats.oldest_in_flight_age_seconds,
        predicted_wait_seconds=None
        if workers is None
        else predicted_wait(average, stats.ready, workers),
        workers=workers,
        busy=None if live is None else sum(w.busy for w in live),
        average_seconds=average,
    )
    rows = [
        WorkerRow(
            queue=name,
            instance=w.instance,
            workers=w.workers,
            busy=w.busy,
            average_seconds=w.average_seconds,
            seen_seconds_ago=max(0.0, now - w.seen_at),
            succeeded=w.succeeded,
            failed=w.failed,
        )
        for w in sorted(live or (), key=lambda w: w.instance)
    ]
    return row, rows, stats


class Point(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """One throughput sample: seconds ago is computed by the reader."""

    at: float
    completed_per_second: float | None
    failed_per_second: float | None
    dead_per_second: float


# (queue, instance) -> (succeeded, failed) as last published.
_Counts = dict[tuple[str, str], tuple[int, int]]


@dataclass
class Sampler:
    """Throughput over the last 15 minutes, from what each refresh saw anyway.

    Dead letters per second come from the change of the dead counts of the queues
    stat'ed by two successive samples (a queue off the page is not counted, so the
    figure covers the page shown). Completed (succeeded attempts) and failed attempts
    per second come from the counts each worker publishes in the worker registry,
    summed over the workers of the queues shown: a worker counts from its second
    sample on (its first gives the base), a worker that restarts is a new instance,
    and a count that went down is taken as a new base. The registry is refreshed once
    per monitor interval of each worker (2 s by default), so the rates move in such
    steps. They are None when no worker shown publishes counts (a backend without a
    registry, workers of an older taskrunner). `completed_source`, when given (the
    in-process runners of ``taskrunner demo --dashboard``), is read instead of the
    registry for the completed rate.
    """

    clock: Clock = field(default_factory=SystemClock)
    completed_source: Callable[[], int] | None = None
    points: deque[Point] = field(default_factory=deque)
    _last_at: float | None = None
    _last_dead: dict[str, int] = field(default_factory=dict)
    _last_completed: int | None = None
    _last_counts: _Counts = field(default_factory=dict)

    def record(self, rows: Sequence[QueueRow], workers: Sequence[WorkerRow] = ()) -> None:
        """Add a sample from one refresh's rows (too close to the last one: skipped)."""
        now = self.clock.monotonic()
        dead = {row.name: row.dead for row in rows if row.error is None}
        completed = None if self.completed_source is None else self.completed_source()
        counts: _Counts = {
            (w.queue, w.instance): (w.succeeded, w.failed)
            for w in workers
            if w.succeeded is not None and w.failed is not None
        }
        if self._last_at is not None:
            elapsed = now - self._last_at
            if elapsed < 0.5:
                return  # several tabs refreshing at once: one sample per half second
            died = sum(
                max(0, count - self._last_dead[name])
                for name, count in dead.items()
                if name in self._last_dead
            )
            succeeded_rate, failed_rate = _count_rates(self._last_counts, counts, elapsed)
            if completed is not None and self._last_completed is not None:
                succeeded_rate = max(0, completed - self._last_completed) / elapsed
            self.points.append(
                Point(
                    at=now,
                    completed_per_second=succeeded_rate,
                    failed_per_second=failed_rate,
                    dead_per_second=died / elapsed,
                )
            )
        self._last_at, self._last_dead, self._last_completed = now, dead, completed
        self._last_counts = counts
        while self.points and self.points[0].at < now - SAMPLE_WINDOW_SECONDS:
            self.points.popleft()

    def series(self) -> list[dict[str, Any]]:
        """The samples, oldest first, each with its age in seconds."""
        now = self.clock.monotonic()
        return [
            {
                "seconds_ago": round(now - p.at, 3),
                "completed_per_second": p.completed_per_second,
                "failed_per_second": p.failed_per_second,
                "dead_per_second": p.dead_per_second,
            }
            for p in self.points
        ]


def _count_rates(
    before: _Counts, after: _Counts, elapsed: float
) -> tuple[float | None, float | None]:
    """Succeeded and failed attempts per second between two samples of worker counts."""
    if not before and not after:
        return None, None
    succeeded = failed = 0
    for key, (ok, bad) in after.items():
        last = before.get(key)
        if last is None or ok < last[0] or bad < last[1]:
            continue  # first sight, or counting again from a new base
        succeeded += ok - last[0]
        failed += bad - last[1]
    return succeeded / elapsed, failed / elapsed


class DeadLetterView(msgspec.Struct, frozen=True, kw_only=True):
    """A dead letter with its envelope decoded where it decodes.

    ``payload`` is the payload's JSON text (never evaluated; the pages escape it);
    ``task`` is None for a body that is not a taskrunner envelope, and then
    ``body_base64`` is what there is to see.
    """

    id: str
    original_id: str
    reason: str
    delivery_count: int
    dead_at: float
    task: str | None
    task_id: str | None
    enqueued_at: float | None
    payload: str | None
    body_base64: str


def dead_letter_view(letter: DeadLetter) -> DeadLetterView:
    """Decode `letter`'s envelope; a malformed body is shown as base64, not an error."""
    task = task_id = payload = None
    enqueued_at = None
    try:
        envelope = decode_envelope(letter.body)
    except DecodeError:
        pass
    else:
        task, task_id, enqueued_at = envelope.task, envelope.id, envelope.enqueued_at
        payload = bytes(envelope.payload).decode("utf-8", errors="replace")
    return DeadLetterView(
        id=letter.message_id,
        original_id=letter.original_id,
        reason=letter.reason,
        delivery_count=letter.delivery_count,
        dead_at=letter.dead_at,
        task=task,
        task_id=task_id,
        enqueued_at=enqueued_at,
        payload=payload,
        body_base64=base64.b64encode(letter.body).decode(),
    )


class MessageView(msgspec.Struct, frozen=True, kw_only=True):
    """A waiting or in-flight message with its envelope decoded where it decodes.

    ``payload`` is the start of the payload's JSON text (at most `PAYLOAD_PREVIEW`
    characters, ``payload_truncated`` says when cut; never evaluated, the pages
    escape it); ``task`` is None for a body that is not a taskrunner envelope.
    ``body_bytes`` is the whole body's size, also when only its start was read.
    ``age_seconds`` is the time since the add; ``lease_remaining_seconds`` the time
    until an in-flight lease lapses unless heartbeated (negative: lapsed, not yet
    reclaimed).
    """

    id: str
    cursor: str
    task: str | None
    task_id: str | None
    delivery_count: int
    added_at: float | None
    age_seconds: float | None
    owner: str | None
    idle_seconds: float | None
    lease_seconds: float | None
    lease_remaining_seconds: float | None
    payload: str | None
    payload_truncated: bool
    body_bytes: int


def message_view(message: BrowsedMessage, now: float) -> MessageView:
    """Decode `message`'s envelope; a body that is no envelope is shown by its size only.

    A body the backend cut (`BrowsedMessage.body_size` set) is read up to its cut
    (`taskrunner.dashboard.preview.envelope_start`).
    """
    task = task_id = payload = None
    truncated = False
    added_at = message.added_at
    enqueued_at = None
    size = len(message.body) if message.body_size is None else message.body_size
    if size > len(message.body):
        start = envelope_start(message.body)
        if start is not None:
            task, task_id, enqueued_at = start.task, start.task_id, start.enqueued_at
            truncated = start.payload_cut or len(start.payload) > PAYLOAD_PREVIEW
            payload = start.payload[:PAYLOAD_PREVIEW]
    else:
        try:
            envelope = decode_envelope(message.body)
        except DecodeError:
            pass
        else:
            task, task_id, enqueued_at = envelope.task, envelope.id, envelope.enqueued_at
            text = bytes(envelope.payload).decode("utf-8", errors="replace")
            truncated = len(text) > PAYLOAD_PREVIEW
            payload = text[:PAYLOAD_PREVIEW]
    if added_at is None:
        added_at = enqueued_at
    remaining = None
    if message.lease_seconds is not None and message.idle_seconds is not None:
        remaining = message.lease_seconds - message.idle_seconds
    return MessageView(
        id=message.message_id,
        cursor=message.cursor,
        task=task,
        task_id=task_id,
        delivery_count=message.delivery_count,
        added_at=added_at,
        age_seconds=None if added_at is None else max(0.0, now - added_at),
        owner=message.consumer,
        idle_seconds=message.idle_seconds,
        lease_seconds=message.lease_seconds,
        lease_remaining_seconds=remaining,
        payload=payload,
        payload_truncated=truncated,
        body_bytes=size,
    )
