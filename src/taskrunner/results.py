"""Task results and message status, read on the producer side.

Internal module; `TaskState` and `TaskStatus` are public through `taskrunner`, and
`Producer.result` / `Producer.status` are the entry points.

A result is written by the worker before the message is acked (or dead-lettered),
under the message id, for the task's ``result_ttl``; see `taskrunner.queue.ResultStore`.
The status of a message is derived from what the backend keeps anyway
(`taskrunner.queue.MessageLookup`: ready, delayed, running, dead) and, once the
backend no longer holds the message, from its stored result (succeeded, failed). A
task that does not store results therefore costs nothing, and its completed messages
read ``unknown``: the backend forgets an acked message at once.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from taskrunner.app import Task
from taskrunner.codec import PayloadCodec, decode_envelope
from taskrunner.context import utc_instant
from taskrunner.errors import DecodeError, MessageError, TaskFailedError
from taskrunner.messages import Envelope, ResultEnvelope
from taskrunner.queue import MessageState

__all__ = ["TaskState", "TaskStatus", "decode_result", "result_value", "status_of", "statuses"]

_RESULT_DECODER = msgspec.json.Decoder(ResultEnvelope)
_ANY_RESULT = PayloadCodec("<unknown>", Any, what="result")


class TaskState(enum.StrEnum):
    """Where a dispatched message is (see `TaskStatus`)."""

    DELAYED = "delayed"
    """Waiting for its due time: a delayed dispatch, or a retry's backoff."""
    READY = "ready"
    """Queued; the next free worker takes it."""
    RUNNING = "running"
    """Leased to a worker."""
    SUCCEEDED = "succeeded"
    """Finished and acked; its stored result says it returned."""
    FAILED = "failed"
    """Failed terminally and left the queue (taken by the failed-task handler, or its
    dead letter was purged or retried); its stored result holds the error."""
    DEAD = "dead"
    """In the dead-letter store."""
    UNKNOWN = "unknown"
    """Not held by the backend and no stored result: completed without storing one,
    its result expired, cancelled, purged, or never dispatched."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStatus:
    """The status of one message, from the backend's records and its stored result.

    Attributes:
        message_id: The message asked about.
        state: Where it is.
        task: The task's name, when known (from the message or its result).
        task_id: The envelope's task id, when known.
        delivery_count: Deliveries so far (the finishing one for a result), when known.
        last_error: The dead-letter reason, or the stored error (``Type: message``)
            of a failed task; None when none is known (a retry's error is not kept).
        enqueued_at: When it was dispatched, when known.
        due_at: For ``delayed``: when it becomes ready, when known.
        consumer: For ``running``: the consumer holding it.
        idle_seconds: For ``running``: seconds since its lease was granted or heartbeated.
        finished_at: For ``succeeded``/``failed``: when the final attempt finished;
            for ``dead``: when it was dead-lettered.
        waiting_for: For ``delayed`` and ``ready``: what the message waits for, in
            words: its due time, a concurrency slot of its key (and who holds it), its
            rate limit's next admission, its turn, or a worker when none has
            received from the queue lately (docs/flow-control.md).
    """

    message_id: str
    state: TaskState
    task: str | None = None
    task_id: str | None = None
    delivery_count: int | None = None
    last_error: str | None = None
    enqueued_at: datetime | None = None
    due_at: datetime | None = None
    consumer: str | None = None
    idle_seconds: float | None = None
    finished_at: datetime | None = None
    waiting_for: str | None = None


def decode_result(body: bytes) -> ResultEnvelope:
    """Decode a stored result body.

    Raises:
        DecodeError: The body is not a result this version can read.
    """
    try:
        return _RESULT_DECODER.decode(body)
    except Exception as exc:
        raise DecodeError(f"malformed stored result: {exc}", body=body) from exc


def result_value(message_id: str, result: ResultEnvelope, tasks: Mapping[str, Task[Any]]) -> Any:
    """The value of a stored result, decoded against its task's return type.

    A task this app does not know decodes as plain JSON values.

    Raises:
        TaskFailedError: The result records a terminal failure.
        PayloadValidationError: The value does not match the task's return type.
    """
    if result.outcome == "failed":
        error_type = result.error_type or "Failed"
        error_message = result.error_message or ""
        raise TaskFailedError(
            f"task {result.task!r} (message {message_id}) failed: {error_type}: {error_message}",
            message_id=message_id,
            task=result.task,
            error_type=error_type,
            error_message=error_message,
            delivery_count=result.delivery_count,
        )
    task = tasks.get(result.task)
    codec = task.result_codec if task is not None else _ANY_RESULT
    return codec.decode(result.value)


def status_of(message_id: str, state: MessageState | None, stored: bytes | None) -> TaskStatus:
    """Combine the backend's record of a message and its stored result into a status."""
    envelope = _envelope(None if state is None else state.body)
    result = _result(stored)
    if state is not None:
        # The backend's record wins over a stored result: a result written just before
        # its ack, or by an earlier run of a message that is running again, is not final.
        return _from_backend(message_id, state, envelope, result)
    if result is not None:
        failed = result.outcome == "failed"
        return TaskStatus(
            message_id=message_id,
            state=TaskState.FAILED if failed else TaskState.SUCCEEDED,
            task=result.task,
            task_id=result.task_id,
            delivery_count=result.delivery_count,
            last_error=_error_text(result) if failed else None,
            finished_at=utc_instant(result.finished_at),
        )
    return TaskStatus(message_id=message_id, state=TaskState.UNKNOWN)


def _from_backend(
    message_id: str,
    state: MessageState,
    envelope: Envelope | None,
    result: ResultEnvelope | None,
) -> TaskStatus:
    error = None
    finished_at = None
    if state.state == "dead":
        error = state.dead_reason
        finished_at = utc_instant(state.dead_at)
    elif result is not None and result.outcome == "failed":
        error = _error_text(result)
    enqueued = envelope.enqueued_at if envelope is not None else state.added_at
    return TaskStatus(
        message_id=message_id,
        state=TaskState(state.state),
        task=envelope.task if envelope is not None else (result.task if result else None),
        task_id=envelope.id if envelope is not None else (result.task_id if result else None),
        delivery_count=state.delivery_count,
        last_error=error,
        enqueued_at=utc_instant(enqueued),
        due_at=utc_instant(state.due_at) if state.state == "delayed" else None,
        consumer=state.consumer if state.state == "running" else None,
        idle_seconds=state.idle_seconds if state.state == "running" else None,
        finished_at=finished_at,
        waiting_for=waiting_text(state),
    )


def waiting_text(
    state: MessageState, holders: Mapping[str, MessageState] | None = None
) -> str | None:
    """What a delayed or ready message waits for, in words; None for any other state.

    `holders` are the states of the messages holding a slot-blocked key's slots, when
    the caller looked them up: each is then named with its consumer and idle time.
    """
    if state.state == "delayed":
        due = utc_instant(state.due_at)
        return "its due time" + (f" ({due.isoformat(timespec='milliseconds')})" if due else "")
    if state.state != "ready":
        return None
    wait = state.waiting
    if wait is None:
        return "a worker to receive it"
    if wait.reason == "slot":
        held = ", ".join(_holder_text(i, (holders or {}).get(i)) for i in wait.holders)
        return f"a concurrency slot of {wait.key!r}, held by {held or 'messages finishing'}"
    if wait.reason == "rate":
        until = utc_instant(wait.until)
        at = f": next admission at {until.isoformat(timespec='milliseconds')}" if until else ""
        return f"the rate limit of {(wait.rate_key or wait.key)!r}{at}"
    return f"its turn in {wait.key!r}: the next receive that reaches the key admits it"


def _holder_text(message_id: str, state: MessageState | None) -> str:
    if state is None or state.state != "running":
        return message_id
    idle = "" if state.idle_seconds is None else f", last heard {state.idle_seconds:.1f} s ago"
    return f"{message_id} (running on {state.consumer}{idle})"


def statuses(
    message_ids: Sequence[str],
    states: Sequence[MessageState | None],
    stored: Sequence[bytes | None],
) -> list[TaskStatus]:
    """`status_of` for each id, in order."""
    return [
        status_of(message_id, state, body)
        for message_id, state, body in zip(message_ids, states, stored, strict=True)
    ]


def _envelope(body: bytes | None) -> Envelope | None:
    if body is None:
        return None
    try:
        return decode_envelope(body)
    except MessageError:
        return None  # a poison body: its status still says where it is


def _result(body: bytes | None) -> ResultEnvelope | None:
    if body is None:
        return None
    try:
        return decode_result(body)
    except DecodeError:
        return None


def _error_text(result: ResultEnvelope) -> str:
    kind = result.error_type or "Failed"
    return f"{kind}: {result.error_message}" if result.error_message else kind
