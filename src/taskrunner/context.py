"""What a running task can learn about its own delivery.

Example::

    @app.task
    async def resize(image: Image) -> None:
        ctx = taskrunner.current_task()
        log.info("attempt %d of %s", ctx.delivery_count, ctx.message_id)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["PendingContext", "TaskContext", "current_context", "current_task", "utc_instant"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskContext:
    """The delivery a task is running for.

    Attributes:
        task_name: The task's registered name.
        task_id: The envelope's task id (stable across deliveries and dead-letter retries).
        message_id: The backend's message id.
        delivery_count: 1 on the first attempt, +1 per redelivery.
        max_attempts: Attempts the task is allowed in total (max_retries + 1).
        consumer: The consumer name holding the lease.
        headers: The envelope's headers.
        scheduled_for: For a run fired by a periodic schedule, the instant it was
            fired for (an aware UTC datetime, exact to the schedule, not when the
            message was sent); None for an ordinary dispatch.
    """

    task_name: str
    task_id: str
    message_id: str
    delivery_count: int
    max_attempts: int
    consumer: str
    headers: dict[str, str] = field(default_factory=dict)
    scheduled_for: datetime | None = None

    @property
    def fence(self) -> int:
        """A fencing token for this attempt's own external writes.

        Guarantee: every new lease of the message (first delivery, redelivery after a
        retry, reclaim after a lapsed lease) has a larger fence than every earlier lease
        of it, and no two leases of one message share a fence. An attempt that lost its
        lease and keeps running (a "zombie": its heartbeats could not reach the backend)
        still holds its old, smaller fence, so a write guarded by the fence refuses it
        once a newer attempt has written::

            UPDATE orders SET state = 'shipped', fence = :fence
             WHERE id = :order AND fence < :fence

        The fence is the delivery count: the backend contract already guarantees it
        grows by one with each lease and never changes with a heartbeat (conformance
        properties P22 and P27). It is per message: a dead letter retried is a new
        message whose fences start again at 1, so guard rows that several messages may
        write with the message id as well (docs/fencing.md has the recipe).
        """
        return self.delivery_count

    @property
    def is_last_attempt(self) -> bool:
        """Whether a failure now goes to the failed-task handler instead of a retry."""
        return self.delivery_count >= self.max_attempts


class PendingContext:
    """What the executor knows of the running delivery; the `TaskContext` is built on demand.

    Internal. Building a frozen dataclass of eight fields costs about a microsecond,
    which every message paid although most tasks never call `current_task`; this
    keeps the parts and builds (and caches) the context on first use.
    """

    __slots__ = ("_built", "_parts")

    def __init__(
        self,
        task_name: str,
        task_id: str,
        message_id: str,
        delivery_count: int,
        max_attempts: int,
        consumer: str,
        headers: Mapping[str, str],
        scheduled_for: float | None,
    ) -> None:
        self._parts = (
            task_name,
            task_id,
            message_id,
            delivery_count,
            max_attempts,
            consumer,
            headers,
            scheduled_for,
        )
        self._built: TaskContext | None = None

    def get(self) -> TaskContext:
        """The context, built the first time it is asked for."""
        built = self._built
        if built is None:
            name, task_id, message_id, count, most, consumer, headers, when = self._parts
            built = self._built = TaskContext(
                task_name=name,
                task_id=task_id,
                message_id=message_id,
                delivery_count=count,
                max_attempts=most,
                consumer=consumer,
                headers=dict(headers),
                scheduled_for=utc_instant(when),
            )
        return built


def utc_instant(seconds: float | None) -> datetime | None:
    """Unix seconds as an aware UTC datetime; None for None and for values out of range.

    The values come from the wire: one that ``fromtimestamp`` refuses (NaN, huge) must
    not turn into a failed task or a failed status call.
    """
    if seconds is None or not math.isfinite(seconds) or not 0 <= seconds < 253_402_300_800:
        return None
    return datetime.fromtimestamp(seconds, UTC)


_CURRENT: ContextVar[TaskContext | PendingContext] = ContextVar("taskrunner_current_task")


def current_context() -> TaskContext | None:
    """The running task's context, or None outside a task (for log filters)."""
    value = _CURRENT.get(None)
    if value is None or isinstance(value, TaskContext):
        return value
    return value.get()


def current_task() -> TaskContext:
    """The context of the task running in this coroutine or thread.

    Raises:
        RuntimeError: Called outside a task run by a taskrunner worker.
    """
    context = current_context()
    if context is None:
        raise RuntimeError("current_task() called outside a running task")
    return context
