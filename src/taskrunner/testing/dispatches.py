"""Record what code dispatched onto a queue, without running it.

`RecordingQueue` wraps a queue: every add (plain, delayed, unique) goes through to
the wrapped queue unchanged and is also kept as a `DispatchRecord`, decoded from the
message body. Code under test takes the wrapper as its queue; the test asserts on
`RecordingQueue.dispatches` (or `Dispatches.assert_dispatched`). Nothing runs until
the test runs it (`run_until_idle` with the same wrapper).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import Any

import msgspec

from taskrunner.app import Task
from taskrunner.clock import Clock
from taskrunner.codec import decode_envelope
from taskrunner.queue import Added, AddRequest, Queue, Scheduling, scheduling_of

__all__ = ["DispatchRecord", "Dispatches", "RecordingQueue"]


@dataclass(frozen=True)
class DispatchRecord:
    """One message as it was dispatched.

    Attributes:
        task: The task name.
        payload: The payload as decoded JSON (a struct or dataclass arrives as a dict).
        delay_seconds: The requested delay (0 when none; for ``at=``, the seconds from
            dispatch to the instant on the queue's wall clock).
        unique_key: The unique key the backend was given (the task's own key when it
            declares ``unique_for``/``unique_key``), None when not unique.
        message_id: The id the backend returned.
        added: False when a unique key matched a message already there.
        headers: The message's headers.
    """

    task: str
    payload: Any
    delay_seconds: float
    unique_key: str | None
    message_id: str
    added: bool
    headers: dict[str, str]


def _record(body: bytes, added: Added | str, request: AddRequest | None) -> DispatchRecord:
    envelope = decode_envelope(body)
    delay = 0.0
    if request is not None and request.due_at is None:
        delay = request.delay_seconds
    elif envelope.due_at is not None:
        delay = max(0.0, envelope.due_at - envelope.enqueued_at)
    message_id = added if isinstance(added, str) else added.message_id
    return DispatchRecord(
        task=envelope.task,
        payload=msgspec.json.decode(bytes(envelope.payload)),
        delay_seconds=delay,
        unique_key=None if request is None else request.unique_key,
        message_id=message_id,
        added=True if isinstance(added, str) else added.added,
        headers=dict(envelope.headers),
    )


class _RecordingScheduling:
    def __init__(self, inner: Scheduling, owner: RecordingQueue) -> None:
        self._inner = inner
        self._owner = owner

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        added = await self._inner.add_requests(requests)
        for request, one in zip(requests, added, strict=True):
            self._owner.dispatches.append(_record(request.body, one, request))
        return added

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecordingQueue:
    """A queue that forwards everything to `inner` and records every dispatch.

    Guarantees: the wrapped queue sees exactly the calls it would see unwrapped; a
    dispatch is recorded only once the backend accepted it, in acceptance order.

    Args:
        inner: The queue to forward to (usually a memory queue).
        clock: The clock `inner` runs on, if known: `run_until_idle` takes it from
            here when not given one.
    """

    def __init__(self, inner: Queue, *, clock: Clock | None = None) -> None:
        self.inner = inner
        self.clock = clock
        self.dispatches = Dispatches()
        part = scheduling_of(inner)
        self._scheduling = None if part is None else _RecordingScheduling(part, self)

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        """`Queue.add`, recorded."""
        ids = await self.inner.add(bodies)
        for body, message_id in zip(bodies, ids, strict=True):
            self.dispatches.append(_record(body, message_id, None))
        return ids

    @property
    def scheduling(self) -> Scheduling | None:
        """The inner queue's `Scheduling` part, with `add_requests` recorded."""
        return self._scheduling

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Dispatches(list[DispatchRecord]):
    """The dispatches recorded so far (a list), with assertion helpers."""

    def of(self, task: Task[Any] | str) -> list[DispatchRecord]:
        """The dispatches of `task` (a task, or its registered name)."""
        name = task if isinstance(task, str) else task.name
        return [record for record in self if record.task == name]

    def assert_dispatched(
        self,
        task: Task[Any] | str,
        payload: Any = ...,
        *,
        delay_seconds: float | None = None,
        unique_key: str | EllipsisType | None = ...,
    ) -> DispatchRecord:
        """Assert that exactly one dispatch of `task` matches; return it.

        `payload` is compared with the decoded JSON (omit it to accept any);
        `delay_seconds` within a millisecond; `unique_key` exactly (omit to accept any).

        Raises:
            AssertionError: No dispatch, or more than one, matches; the message lists
                what was dispatched.
        """
        name = task if isinstance(task, str) else task.name
        matches = [
            r
            for r in self.of(task)
            if (payload is ... or r.payload == payload)
            and (delay_seconds is None or abs(r.delay_seconds - delay_seconds) <= 1e-3)
            and (unique_key is ... or r.unique_key == unique_key)
        ]
        if len(matches) != 1:
            seen = "\n".join(f"  {r}" for r in self) or "  (nothing)"
            raise AssertionError(
                f"expected exactly one dispatch of {name!r} matching, found {len(matches)}; "
                f"dispatched:\n{seen}"
            )
        return matches[0]
