"""The enqueue side: turn (task, payload) into messages on a queue.

Example::

    producer = taskrunner.Producer(queue, app)
    message_id = await producer.dispatch(send_email, Email(to="ada@example.com"))
    ids = await producer.dispatch_many(send_email, [Email(to=a) for a in addresses])
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, overload

from taskrunner.app import App, Task
from taskrunner.clock import Clock, SystemClock
from taskrunner.codec import encode_envelope
from taskrunner.messages import Envelope
from taskrunner.queue import Queue

__all__ = ["Producer", "encode_message"]

PayloadT = TypeVar("PayloadT")

# Messages per `Queue.add` call in dispatch_many: one round trip each, bounded memory.
_ADD_CHUNK = 1000


class Producer:
    """Dispatches tasks of `app` onto `queue`.

    Guarantees: a payload is validated against its task's declared type and the
    message size limit before anything is sent; when `dispatch` returns, the backend
    has accepted the message (durably only if its capabilities say
    ``durable_enqueue``).

    Args:
        queue: The backend queue to add messages to.
        app: The application whose tasks (and size limit) apply.
        clock: Source of the enqueue timestamp.
    """

    def __init__(self, queue: Queue, app: App, *, clock: Clock | None = None) -> None:
        self._queue = queue
        self._app = app
        self._clock = clock or SystemClock()

    @overload
    async def dispatch(
        self, task: Task[PayloadT], payload: PayloadT, *, headers: Mapping[str, str] | None = None
    ) -> str: ...
    @overload
    async def dispatch(
        self, task: Task[None], payload: None = None, *, headers: Mapping[str, str] | None = None
    ) -> str: ...
    @overload
    async def dispatch(
        self, task: str, payload: Any = None, *, headers: Mapping[str, str] | None = None
    ) -> str: ...

    async def dispatch(
        self,
        task: Task[Any] | str,
        payload: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> str:
        """Enqueue one run of `task` with `payload`; returns the backend's message id.

        Raises:
            UnknownTaskError: `task` is a name no task of the app has.
            PayloadValidationError: The payload does not match the task's type.
            PayloadTooLargeError: The encoded message exceeds the app's limit.
            BackendUnavailableError: The backend could not be reached.
        """
        body = self.encode(task, payload, headers=headers)
        (message_id,) = await self._queue.add([body])
        return message_id

    async def dispatch_many(
        self,
        task: Task[PayloadT] | str,
        payloads: Iterable[PayloadT],
        *,
        headers: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Enqueue one run of `task` per payload; returns message ids in order.

        Every payload is validated before the first message is sent. Messages are
        sent in chunks, one backend round trip per chunk.

        Raises:
            The same errors as `dispatch`. On `BackendUnavailableError` some chunks may
            have been added.
        """
        bodies = [self.encode(task, payload, headers=headers) for payload in payloads]
        ids: list[str] = []
        for start in range(0, len(bodies), _ADD_CHUNK):
            ids.extend(await self._queue.add(bodies[start : start + _ADD_CHUNK]))
        return ids

    def encode(
        self, task: Task[Any] | str, payload: Any, *, headers: Mapping[str, str] | None = None
    ) -> bytes:
        """The message body `dispatch` would send, validated and size-checked."""
        return encode_message(self._app, task, payload, clock=self._clock, headers=headers)


def encode_message(
    app: App,
    task: Task[Any] | str,
    payload: Any,
    *,
    clock: Clock | None = None,
    headers: Mapping[str, str] | None = None,
) -> bytes:
    """The body `Producer.dispatch` would send for `payload`, without a queue.

    Raises:
        UnknownTaskError: `task` is a name `app` does not know.
        PayloadValidationError: The payload does not match the task's payload type.
        PayloadTooLargeError: The body exceeds the app's ``max_message_bytes``.
    """
    resolved = app.get_task(task) if isinstance(task, str) else task
    envelope = Envelope(
        id=uuid.uuid4().hex,
        task=resolved.name,
        payload=resolved.codec.encode(payload),
        enqueued_at=(clock or SystemClock()).time(),
        headers=dict(headers) if headers else {},
    )
    return encode_envelope(envelope, max_bytes=app.max_message_bytes)
