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
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

__all__ = ["Attempt", "AttemptObserver", "BuiltinObserver", "Outcome", "combine"]

_log = logging.getLogger("taskrunner.executor")

# The headers of an attempt whose envelope is unknown: shared, so it must be read-only.
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


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


@dataclass(kw_only=True)
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

    @classmethod
    def begin(
        cls, queue: str, message_id: str, delivery_count: int, consumer: str, started_at: float
    ) -> Attempt:
        """A new attempt with the first fields set and the rest at their defaults.

        The executor's constructor: it runs for every message, and setting five
        fields (the defaults are class attributes, not slots) costs half of the
        generated ``__init__``.
        """
        attempt = object.__new__(cls)
        attempt.queue = queue
        attempt.message_id = message_id
        attempt.delivery_count = delivery_count
        attempt.consumer = consumer
        attempt.started_at = started_at
        attempt.headers = _NO_HEADERS
        return attempt

    @property
    def latency_seconds(self) -> float | None:
        """Queue latency: from dispatch (or from becoming due) to `started_at`.

        Only meaningful on the first delivery (later ones include retry backoff);
        None when the envelope's times are unknown or not finite (data from the
        wire). Never negative (clock skew between producer and worker hosts is
        clamped to 0).
        """
        since = self.due_at if self.due_at is not None else self.enqueued_at
        if since is None:
            return None
        latency = self.started_at - since
        if not math.isfinite(latency):
            return None
        return max(0.0, latency)


class AttemptObserver(Protocol):
    """Sees every delivery the executor carries; see the module docstring for when."""

    def attempt_started(self, attempt: Attempt) -> object:
        """Called before the task runs; the returned value is passed to `attempt_finished`."""
        ...

    def attempt_finished(self, attempt: Attempt, token: object) -> None:
        """Called once the outcome is settled; `token` is what `attempt_started` returned."""
        ...


class _Observers:
    """Several observers told in order, each one's exception logged and skipped."""

    __slots__ = ("_observers",)

    def __init__(self, observers: tuple[AttemptObserver, ...]) -> None:
        self._observers = observers

    def attempt_started(self, attempt: Attempt) -> object:
        tokens: list[object] = []
        for observer in self._observers:
            try:
                tokens.append(observer.attempt_started(attempt))
            except Exception:  # an observer's bug must never affect the delivery
                _log.exception("attempt observer %r raised", observer)
                tokens.append(None)
        return tokens

    def attempt_finished(self, attempt: Attempt, token: object) -> None:
        assert isinstance(token, list)
        for observer, own in zip(self._observers, token, strict=False):
            try:
                observer.attempt_finished(attempt, own)
            except Exception:
                _log.exception("attempt observer %r raised", observer)


class BuiltinObserver:
    """The runner's own observers fused into one, so each costs one call, not a loop step.

    Every message pays for this, so it calls them directly: `attempt_started` only
    reaches the tracer (metrics and the log line have nothing to do then),
    `attempt_finished` reaches the tracer last, so the others still see its span
    current.
    """

    __slots__ = ("_log", "_metrics", "_tracer")

    def __init__(
        self, metrics: AttemptObserver, log: AttemptObserver, tracer: AttemptObserver | None
    ) -> None:
        self._metrics = metrics
        self._log = log
        self._tracer = tracer

    def attempt_started(self, attempt: Attempt) -> object:
        """Tell the tracer; its token is this observer's."""
        tracer = self._tracer
        return None if tracer is None else tracer.attempt_started(attempt)

    def attempt_finished(self, attempt: Attempt, token: object) -> None:
        """Tell metrics, then the log line, then the tracer (even if one of them raised)."""
        try:
            self._metrics.attempt_finished(attempt, None)
            self._log.attempt_finished(attempt, None)
        finally:
            if self._tracer is not None:
                self._tracer.attempt_finished(attempt, token)


def combine(observers: tuple[AttemptObserver, ...]) -> AttemptObserver | None:
    """One observer telling all of `observers` in order (None for none, itself for one)."""
    if not observers:
        return None
    if len(observers) == 1:
        return observers[0]
    return _Observers(observers)
