"""What a failed-task handler is told, and its signature.

A *terminal failure* is a delivery the runner will not run (again): its body is
malformed, it names an unknown task, its payload has the wrong type, it was delivered
more times than its retries allow, or its last attempt failed. The runner then calls
the failed-task handler once. Without a handler (the default), the message is
dead-lettered with the reason.

A handler that returns normally has dealt with the message: the runner acks it. A
handler that raises does not lose it: the runner dead-letters it, with the handler's
error appended to the reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from taskrunner.messages import Envelope
from taskrunner.queue import Delivery

__all__ = ["FailedTaskHandler", "TaskFailure"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFailure:
    """A delivery the runner has given up on.

    Attributes:
        delivery: The delivery, with its raw body and delivery count.
        reason: Why, in words fit for a dead-letter record and a log line.
        envelope: The decoded envelope, None when the body was malformed.
        error: The exception of the last attempt or of decoding, if any.
    """

    delivery: Delivery
    reason: str
    envelope: Envelope | None = None
    error: BaseException | None = None

    @property
    def task_name(self) -> str | None:
        """The task the message names, None when the body was malformed."""
        return None if self.envelope is None else self.envelope.task


FailedTaskHandler = Callable[[TaskFailure], Awaitable[None] | None]
"""Called once per terminal failure; may be sync or async (a plain function runs in a thread)."""
