"""The wire format: one versioned envelope around every task payload.

Internal module; the public names are re-exported by `taskrunner`.

The envelope carries the task name and the payload as raw JSON, so the executor can
decode the payload against the *task's* declared type after looking the task up. The
``v`` tag versions the format: a future incompatible envelope gets a new tag and both
decode as a union. Fields are only ever added with defaults, and unknown fields are
ignored, so a rolling upgrade never breaks decoding.
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["Envelope", "ResultEnvelope"]


class Envelope(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    tag_field="v",
    tag=1,
):
    """What travels through every backend as the message body.

    Attributes:
        id: Task id: a random hex string, the same for every delivery of this task and
            kept when a dead letter is retried (backend message ids are not).
        task: Registered name of the task to run.
        payload: The payload as JSON, decoded only once the task (and its type) is known.
        enqueued_at: Wall-clock time of dispatch, Unix seconds.
        headers: Free-form string metadata (trace context, correlation ids).
        scheduled_for: The instant (Unix seconds) a periodic schedule fired this run
            for; None for an ordinary dispatch. Added with issue 11; older messages
            decode with None.
        due_at: For a delayed dispatch, the instant (Unix seconds) it was due; queue
            latency counts from here. Added with issue 12.
    """

    id: str
    task: str
    payload: msgspec.Raw
    enqueued_at: float
    headers: dict[str, str] = {}
    scheduled_for: float | None = None
    due_at: float | None = None


class ResultEnvelope(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    tag_field="v",
    tag=1,
):
    """What a result store keeps for one message: its task's outcome and value.

    Versioned like `Envelope`; the backend stores it as opaque bytes.

    Attributes:
        task: The task's name (the reader decodes `value` against its return type).
        task_id: The envelope's task id.
        outcome: ``succeeded`` or ``failed`` (a terminal failure).
        value: The return value as JSON (``null`` for a failure).
        error_type: For a failure: the exception's type name (or the kind of terminal
            failure when no exception was raised, such as ``TooManyDeliveries``).
        error_message: For a failure: the exception's message or the reason.
        delivery_count: The delivery that finished.
        finished_at: Wall-clock time (Unix seconds) the attempt finished.
    """

    task: str
    task_id: str
    outcome: Literal["succeeded", "failed"]
    value: msgspec.Raw = msgspec.Raw(b"null")
    error_type: str | None = None
    error_message: str | None = None
    delivery_count: int = 1
    finished_at: float = 0.0
