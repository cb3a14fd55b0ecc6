"""What a running task can learn about its own delivery.

Example::

    @app.task
    async def resize(image: Image) -> None:
        ctx = taskrunner.current_task()
        log.info("attempt %d of %s", ctx.delivery_count, ctx.message_id)
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["TaskContext", "current_task"]


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
    def is_last_attempt(self) -> bool:
        """Whether a failure now goes to the failed-task handler instead of a retry."""
        return self.delivery_count >= self.max_attempts


_CURRENT: ContextVar[TaskContext] = ContextVar("taskrunner_current_task")


def current_task() -> TaskContext:
    """The context of the task running in this coroutine or thread.

    Raises:
        RuntimeError: Called outside a task run by a taskrunner worker.
    """
    try:
        return _CURRENT.get()
    except LookupError:
        raise RuntimeError("current_task() called outside a running task") from None
