"""The application object: a named queue and the tasks registered on it.

Example::

    import msgspec
    import taskrunner

    app = taskrunner.App("emails")

    class Email(msgspec.Struct):
        to: str

    @app.task(max_retries=5, timeout_seconds=30)
    async def send_email(email: Email) -> None:
        ...

A task takes at most one argument, its payload; the argument's annotation is the
payload type (a msgspec Struct, a dataclass, a TypedDict or plain JSON types). Payloads
are validated against it on dispatch and again on execution.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar, get_type_hints, overload

from taskrunner.codec import PayloadCodec
from taskrunner.errors import ConfigurationError, UnknownTaskError

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "App", "Task"]

PayloadT = TypeVar("PayloadT")

# Largest encoded message accepted on dispatch and on execution, in bytes.
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024

# Queue names become part of backend keys (a Redis hash tag), so braces and spaces are out.
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
_TASK_NAME = re.compile(r"^[^\s{}]{1,200}$")


class Task(Generic[PayloadT]):
    """A registered task: a function, its payload type and its retry policy.

    Calling the task calls the function directly (useful in tests); use
    `taskrunner.Producer.dispatch` to run it on a worker.

    Attributes:
        name: Name on the wire.
        func: The function; ``async def`` functions run on the event loop, plain ``def``
            functions in worker threads.
        is_async: Whether `func` is a coroutine function.
        takes_payload: Whether `func` takes a payload argument.
        max_retries: Retries after the first failed attempt (None: the runner's default).
        timeout_seconds: Time limit of one attempt (None: the runner's default).
        codec: Validates and (de)serialises this task's payloads.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str,
        max_retries: int | None,
        timeout_seconds: float | None,
    ) -> None:
        if not _TASK_NAME.match(name):
            raise ConfigurationError(
                f"task name {name!r} must be 1-200 characters without spaces or braces",
                setting="name",
            )
        if max_retries is not None and max_retries < 0:
            raise ConfigurationError(
                f"task {name!r}: max_retries={max_retries} must be >= 0 (0 means no retry)",
                setting="max_retries",
            )
        if timeout_seconds is not None and not timeout_seconds > 0:
            raise ConfigurationError(
                f"task {name!r}: timeout_seconds={timeout_seconds} must be > 0 (or None)",
                setting="timeout_seconds",
            )
        self.name = name
        self.func = func
        self.is_async = inspect.iscoroutinefunction(func)
        self.max_retries = max_retries
        self.timeout_seconds = timeout_seconds
        self.takes_payload, payload_type = _payload_type(func, name)
        self.codec = PayloadCodec(name, payload_type)

    def __call__(self, payload: PayloadT) -> Any:
        """Call the function directly, in this process (no queue involved)."""
        return self.func(payload) if self.takes_payload else self.func()

    def __repr__(self) -> str:
        return f"<Task {self.name!r}>"


class App:
    """A queue name plus the tasks that may be dispatched to it.

    Args:
        queue: Name of the queue the tasks travel on.
        max_message_bytes: Largest encoded message accepted, on dispatch and on execution.
    """

    def __init__(
        self, queue: str = "default", *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ) -> None:
        if not _QUEUE_NAME.match(queue):
            raise ConfigurationError(
                f"queue name {queue!r} must be 1-100 characters of letters, digits, '_.:-'",
                setting="queue",
            )
        if max_message_bytes < 1:
            raise ConfigurationError(
                f"max_message_bytes={max_message_bytes} must be >= 1",
                setting="max_message_bytes",
            )
        self.queue = queue
        self.max_message_bytes = max_message_bytes
        self._tasks: dict[str, Task[Any]] = {}

    @property
    def tasks(self) -> Mapping[str, Task[Any]]:
        """Registered tasks by name (read-only view)."""
        return self._tasks

    def get_task(self, name: str) -> Task[Any]:
        """The task registered under `name`.

        Raises:
            UnknownTaskError: No task has that name.
        """
        try:
            return self._tasks[name]
        except KeyError:
            known = ", ".join(sorted(self._tasks)) or "none"
            raise UnknownTaskError(
                f"unknown task {name!r} (registered: {known})", task=name
            ) from None

    @overload
    def task(self, func: Callable[[], Awaitable[Any]], /) -> Task[None]: ...
    @overload
    def task(self, func: Callable[[PayloadT], Awaitable[Any]], /) -> Task[PayloadT]: ...
    @overload
    def task(self, func: Callable[[], Any], /) -> Task[None]: ...
    @overload
    def task(self, func: Callable[[PayloadT], Any], /) -> Task[PayloadT]: ...
    @overload
    def task(
        self,
        /,
        *,
        name: str | None = None,
        max_retries: int | None = None,
        timeout_seconds: float | None = None,
    ) -> _TaskDecorator: ...

    def task(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        max_retries: int | None = None,
        timeout_seconds: float | None = None,
    ) -> Task[Any] | _TaskDecorator:
        """Register a function as a task; use as ``@app.task`` or ``@app.task(...)``.

        Args:
            func: The function (when used without parentheses).
            name: Name on the wire; defaults to ``module.qualname`` of the function.
            max_retries: Retries after the first failed attempt; 0 means none.
            timeout_seconds: Time limit of one attempt.

        Raises:
            ConfigurationError: A bad name or setting, or a name registered twice.
            TypeError: The function takes more than one required argument, or its
                payload type cannot be represented as JSON.
        """
        decorator = _TaskDecorator(
            self, name=name, max_retries=max_retries, timeout_seconds=timeout_seconds
        )
        return decorator if func is None else decorator(func)

    def _register(self, task: Task[Any]) -> None:
        if task.name in self._tasks:
            raise ConfigurationError(
                f"a task named {task.name!r} is already registered on queue {self.queue!r}",
                setting="name",
            )
        self._tasks[task.name] = task


class _TaskDecorator:
    def __init__(
        self,
        app: App,
        *,
        name: str | None,
        max_retries: int | None,
        timeout_seconds: float | None,
    ) -> None:
        self._app = app
        self._name = name
        self._max_retries = max_retries
        self._timeout_seconds = timeout_seconds

    @overload
    def __call__(self, func: Callable[[], Awaitable[Any]], /) -> Task[None]: ...
    @overload
    def __call__(self, func: Callable[[PayloadT], Awaitable[Any]], /) -> Task[PayloadT]: ...
    @overload
    def __call__(self, func: Callable[[], Any], /) -> Task[None]: ...
    @overload
    def __call__(self, func: Callable[[PayloadT], Any], /) -> Task[PayloadT]: ...

    def __call__(self, func: Callable[..., Any], /) -> Task[Any]:
        name = self._name or f"{func.__module__}.{func.__qualname__}"
        task: Task[Any] = Task(
            func,
            name=name,
            max_retries=self._max_retries,
            timeout_seconds=self._timeout_seconds,
        )
        self._app._register(task)
        return task


def _payload_type(func: Callable[..., Any], name: str) -> tuple[bool, Any]:
    """Whether `func` takes a payload, and the payload's declared type."""
    parameters = [
        p
        for p in inspect.signature(func).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if len(parameters) > 1:
        raise TypeError(
            f"task {name!r}: a task takes at most one required argument (its payload), "
            f"got {len(parameters)}: {', '.join(p.name for p in parameters)}"
        )
    if not parameters:
        return False, None
    try:
        hints = get_type_hints(func)
    except NameError as exc:
        raise ConfigurationError(
            f"task {name!r}: cannot resolve the type annotations of {func.__qualname__} ({exc}); "
            "define the payload type at module level so it can be found by name",
            setting="payload type",
        ) from exc
    return True, hints.get(parameters[0].name, Any)
