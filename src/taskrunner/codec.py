"""The one place where bytes become envelopes and payloads, and back.

Internal module. Decoders and encoders are built once and reused. Every failure is a
`taskrunner.errors.MessageError` that names the problem; a body that is not an
envelope raises `DecodeError` carrying the raw bytes, so the dead letter keeps the
evidence.

"Every failure" means any exception, not only msgspec's decode errors: msgspec raises
`RecursionError` on deeply nested input (a 2 KB body suffices), and a payload type's
``__post_init__`` may raise anything. A message that cannot be read must be
dead-lettered by the worker, never crash it: a crashed worker leaves the message to
come back after every lease, forever.
"""

from __future__ import annotations

from typing import Any

import msgspec

from taskrunner.errors import DecodeError, PayloadTooLargeError, PayloadValidationError
from taskrunner.messages import Envelope

__all__ = [
    "PayloadCodec",
    "decode_envelope",
    "encode_envelope",
]

_ENCODER = msgspec.json.Encoder()
_ENVELOPE_DECODER = msgspec.json.Decoder(Envelope)


def encode_envelope(envelope: Envelope, *, max_bytes: int) -> bytes:
    """Encode an envelope, refusing results larger than `max_bytes`.

    Raises:
        PayloadTooLargeError: The encoded envelope exceeds `max_bytes`.
    """
    body = _ENCODER.encode(envelope)
    if len(body) > max_bytes:
        raise PayloadTooLargeError(
            f"task {envelope.task!r}: encoded message is {len(body)} bytes, "
            f"larger than the limit of {max_bytes} bytes (max_message_bytes)",
            size=len(body),
            limit=max_bytes,
        )
    return body


def decode_envelope(body: bytes) -> Envelope:
    """Decode a message body.

    Raises:
        DecodeError: The body is not a valid envelope; carries the bytes.
    """
    try:
        return _ENVELOPE_DECODER.decode(body)
    except Exception as exc:
        raise DecodeError(f"malformed message: {_problem(exc)}", body=body) from exc


class PayloadCodec:
    """Encodes and validates the payloads of one task against its declared type.

    Args:
        task: The task's name, used in error messages.
        payload_type: The declared type (a msgspec Struct, a dataclass, a TypedDict or
            plain JSON types); `typing.Any` accepts any JSON value.
        what: What the values are, for error messages (``"result"`` for the codec of
            a task's return value).
    """

    def __init__(self, task: str, payload_type: Any, *, what: str = "payload") -> None:
        self._task = task
        self._type = payload_type
        self._what = what
        try:
            self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(payload_type)
        except TypeError as exc:
            raise TypeError(
                f"task {task!r}: {what} type {payload_type!r} cannot be encoded as JSON: {exc}"
            ) from exc

    @property
    def type_name(self) -> str:
        """The declared type as error messages name it (``Greeting``, ``list[int]``)."""
        return _type_name(self._type)

    def encode(self, payload: object) -> msgspec.Raw:
        """Validate `payload` against the declared type and encode it as JSON.

        The payload goes through the same decoder the worker will use, so a payload
        that would fail on the worker fails here, at dispatch.

        Raises:
            PayloadValidationError: The payload does not match the declared type.
        """
        try:
            raw = _ENCODER.encode(payload)
        except TypeError as exc:
            raise PayloadValidationError(
                f"task {self._task!r}: {self._what} cannot be encoded as JSON: {exc}",
                task=self._task,
            ) from exc
        self.decode(raw)
        return msgspec.Raw(raw)

    def decode(self, raw: bytes | msgspec.Raw) -> Any:
        """Decode a JSON payload into the declared type.

        Raises:
            PayloadValidationError: The payload does not match the declared type.
        """
        try:
            return self._decoder.decode(raw)
        except Exception as exc:
            raise PayloadValidationError(
                f"task {self._task!r}: {self._what} does not match {_type_name(self._type)}: "
                f"{_problem(exc)}",
                task=self._task,
            ) from exc


def _problem(exc: Exception) -> str:
    if isinstance(exc, msgspec.DecodeError):
        return str(exc)
    if isinstance(exc, RecursionError):
        return f"JSON nested too deeply to decode ({exc})"
    # Raised by user code (a payload type's __post_init__): name the exception type.
    return f"{type(exc).__name__}: {exc}"


def _type_name(payload_type: Any) -> str:
    return payload_type.__name__ if isinstance(payload_type, type) else repr(payload_type)
