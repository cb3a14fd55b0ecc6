"""Every exception taskrunner raises, in one tree.

```
TaskrunnerError
├── ConfigurationError          a setting, URL or task definition breaks a rule
├── BackendError                raised by a Queue implementation
│   ├── BackendUnavailableError     the server cannot be reached; retry later
│   ├── QueueClosedError            a method was called after aclose()
│   └── UnsupportedServerError      the server is too old or lacks a needed command
├── MessageError                a message cannot be built or read
│   ├── DecodeError                 bytes are not a valid envelope; carries the bytes
│   ├── PayloadValidationError      a payload does not match its task's declared type
│   ├── PayloadTooLargeError        an encoded message exceeds the size limit
│   └── UnknownTaskError            a message names a task nobody registered
└── TaskTimeoutError            a task ran longer than its timeout
```

Expected conditions (an empty queue, a lost lease, an already acked message) are
return values of the `Queue` methods, never exceptions. Backends translate their
client library's exceptions into `BackendError` subclasses at one boundary, chaining
the original with ``raise ... from exc``.
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BackendUnavailableError",
    "ConfigurationError",
    "DecodeError",
    "MessageError",
    "PayloadTooLargeError",
    "PayloadValidationError",
    "QueueClosedError",
    "TaskFailedError",
    "TaskTimeoutError",
    "TaskrunnerError",
    "UnknownTaskError",
    "UnsupportedFeatureError",
    "UnsupportedServerError",
]


class TaskrunnerError(Exception):
    """Base class of every exception raised by taskrunner."""


class ConfigurationError(TaskrunnerError, ValueError):
    """A setting, backend URL or task definition breaks a rule.

    The message names the offending value and the rule it breaks.

    Attributes:
        setting: Name of the offending setting, when there is one.
    """

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class UnsupportedFeatureError(ConfigurationError):
    """The backend does not offer what a call asked for; nothing was sent.

    A delayed or unique dispatch, or cancel, on a backend without the capability.

    Attributes:
        backend: The backend's class name.
        capability: The `Capabilities` flag it does not claim.
    """

    def __init__(self, message: str, *, backend: str, capability: str) -> None:
        super().__init__(message, setting=capability)
        self.backend = backend
        self.capability = capability


class BackendError(TaskrunnerError):
    """Base class of the errors a `Queue` implementation raises."""


class BackendUnavailableError(BackendError):
    """The backend could not be reached or the connection was lost.

    The operation may or may not have taken effect; callers retry later.
    """


class QueueClosedError(BackendError):
    """A `Queue` method other than `aclose` was called after `aclose`."""


class UnsupportedServerError(BackendError):
    """The server is too old or lacks a command the backend needs."""


class MessageError(TaskrunnerError):
    """A message cannot be built (on dispatch) or read (on execution)."""


class DecodeError(MessageError):
    """Bytes are not a valid envelope.

    Attributes:
        body: The raw bytes that failed to decode, kept as evidence for the dead letter.
    """

    def __init__(self, message: str, *, body: bytes) -> None:
        super().__init__(message)
        self.body = body


class PayloadValidationError(MessageError, ValueError):
    """A payload does not match the type its task declares.

    Attributes:
        task: Name of the task whose payload type was violated.
    """

    def __init__(self, message: str, *, task: str) -> None:
        super().__init__(message)
        self.task = task


class PayloadTooLargeError(MessageError, ValueError):
    """An encoded message is larger than the configured limit.

    Attributes:
        size: Encoded size in bytes.
        limit: The configured limit in bytes.
    """

    def __init__(self, message: str, *, size: int, limit: int) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class UnknownTaskError(MessageError, LookupError):
    """A message names a task that is not registered.

    Attributes:
        task: The unknown task name.
    """

    def __init__(self, message: str, *, task: str) -> None:
        super().__init__(message)
        self.task = task


class TaskTimeoutError(TaskrunnerError, TimeoutError):
    """A task ran longer than its ``timeout_seconds``."""


class TaskFailedError(TaskrunnerError):
    """`Producer.result` found that the task failed terminally; its stored error is here.

    Attributes:
        message_id: The message the result belongs to.
        task: The task's name.
        error_type: The exception's type name, or the kind of terminal failure found
            before running (``TooManyDeliveries``, say).
        error_message: The exception's message, or the reason.
        delivery_count: The delivery whose failure was final.
    """

    def __init__(
        self,
        message: str,
        *,
        message_id: str,
        task: str,
        error_type: str,
        error_message: str,
        delivery_count: int,
    ) -> None:
        super().__init__(message)
        self.message_id = message_id
        self.task = task
        self.error_type = error_type
        self.error_message = error_message
        self.delivery_count = delivery_count
