"""What the executor tells observers about each delivery it carries to an outcome.

Internal module; `Attempt`, `Outcome` and `AttemptObserver` are public through
`taskrunner`. The executor calls every observer's `AttemptObserver.attempt_started`
when it starts on a delivery (after decoding its envelope, before running the task)
and `AttemptObserver.attempt_finished` once the outcome is settled with the backend
(acked, released, dead-lettered, handled, or found lost). Metrics (duration and
queue-latency histograms, outcome counters), the per-attempt log line and tracing
spans are observers; a user may add their own through `RunnerConfig.observers`.

Both calls are made from the delivery's own asyncio task, in the same
`contextvars.Context`, so an observer may set a context variable in
`attempt_started` (a tracing span made current, say) and reset it in
`attempt_finished`; the task's code runs in between and sees it (threads of plain
``def`` tasks get a copy of that context).

An observer must be cheap and must not raise: the executor logs an exception an
observer raises and carries on, so a broken observer never loses a message, but
it costs a traceback per delivery.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Attempt", "AttemptObserver", "Outcome"]


class Outcome(enum.StrEnum):
    """How one delivery ended, as far as this worker is concerned."""

    SUCCEEDED = "succeeded"
    """The task returned and its message was acked."""
    RETRIED = "retried"
    """The attempt failed and the message was released for a later retry."""
    DEAD_LETTERED = "dead_lettered"
    """A terminal failure moved the message to the dead-letter store."""
    HANDLED = "handled"
    """A terminal failure was taken by the failed-task handler (and the message acked)."""
    LOST = "lost"
    """The lease was lost (before or on settling); the message is another worker's now."""
    CANCELLED = "cancelled"
    """Cancelled at shutdown; the message was released (or left leased) for redelivery."""
    UNSETTLED = "unsettled"
    """The ack, release or dead-letter call failed; the message comes back after its lease."""


@dataclass(slots=True, kw_only=True)
class Attempt:
    """One delivery being carried to its outcome.

    The executor fills the first group of fields before `attempt_started` and the
    second group before `attempt_finished`.

    Attributes:
        queue: The queue's name.
        message_id: The backend's message id.
        delivery_count: 1 on the first delivery.
        consumer: The consumer holding the lease.
        task: The task name from the envelope; None when the body is not a readable
            envelope (too large, undecodable, or over the runner-wide attempt cap).
        task_id: The envelope's task id; None as for `task`.
        enqueued_at: Wall-clock dispatch time from the envelope (Unix seconds).
        due_at: When a delayed dispatch became due (Unix seconds), else None: the
            queue latency of a delayed message counts from here, not from dispatch.
        headers: The envelope's headers (trace context travels here).
        started_at: Wall-clock time the executor started on the delivery.
        ran: Whether the task's code was called (False for a terminal failure found
            before running: bad body, unknown task, too many deliveries).
        seconds: How long the task's code ran (monotonic clock); None when it did not run.
        outcome: The settled outcome.
        error: The exception of a failed attempt, None on success.
        description: A one-line description of the failure (type and message), or
            the reason of a terminal failure found before running; None on success.
    """

    queue: str
    message_id: str
    delivery_count: int
    consumer: str
    task: str | None = None
    task_id: str | None = None
    enqueued_at: float | None = None
    due_at: float | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    started_at: float = 0.0
    ran: bool = False
    seconds: float | None = None
    outcome: Outcome | None = None
    error: BaseException | None = None
    description: str | None = None

    @property
    def latency_seconds(self) -> float | None:
        """Queue latency: from dispatch (or from becoming due) to `started_at`.

        Only meaningful on the first delivery (later ones include retry backoff);
        None when the envelope's times are unknown. Never negative (clock skew
        between producer and worker hosts is clamped to 0).
        """
        since = self.due_at if self.due_at is not None else self.enqueued_at
        if since is None:
            return None
        return max(0.0, self.started_at - since)


class AttemptObserver(Protocol):
    """Sees every delivery the executor carries; see the module docstring for when."""

    def attempt_started(self, attempt: Attempt) -> object:
        """Called before the task runs; the returned value is passed to `attempt_finished`."""
        ...

    def attempt_finished(self, attempt: Attempt, token: object) -> None:
        """Called once the outcome is settled; `token` is what `attempt_started` returned."""
        ...
