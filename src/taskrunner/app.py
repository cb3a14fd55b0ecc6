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
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, Generic, TypeVar, get_type_hints, overload

from taskrunner.codec import PayloadCodec, encode_envelope
from taskrunner.errors import ConfigurationError, UnknownTaskError
from taskrunner.limits import FlowKeyFunc, FlowOptions, FlowPolicy
from taskrunner.messages import Envelope
from taskrunner.names import check_queue_name
from taskrunner.queue import PRIORITY_MAX, PRIORITY_MIN
from taskrunner.schedules import CatchUp, Schedule, Timing, check_catch_up

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "App", "Task"]

PayloadT = TypeVar("PayloadT")

# Largest encoded message accepted on dispatch and on execution, in bytes.
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024

# How long a stored task result is kept unless the task or app says otherwise.
DEFAULT_RESULT_TTL_SECONDS = 3600.0

# Queue names become part of backend keys (a Redis hash tag), so braces and spaces are out.
# Checked with fullmatch: "$" also matches before a trailing newline.
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
_TASK_NAME = re.compile(r"[^\s{}]{1,200}")
_SCHEDULE_NAME = re.compile(r"[^\s{}]{1,200}")

UniqueKeyFunc = Callable[[Any], str]
"""Makes a task's default unique key from its payload (the task name is prefixed)."""


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
        unique_for: Seconds a dispatch's unique key is held at most (None: until the
            message's final outcome); only used when the task is unique.
        unique_key: Makes the default unique key from the payload, or None.
        is_unique: Whether a dispatch without an explicit ``unique_key`` is unique
            (``unique_for`` or ``unique_key`` was given). Its key is the task name, a
            colon and ``unique_key(payload)``, or without that function the task name,
            a colon and the SHA-256 of the encoded payload JSON.
        store_result: Whether a worker stores the task's outcome (return value or
            terminal failure) for `taskrunner.Producer.result`.
        result_ttl: Seconds a stored result is kept.
        result_codec: Encodes and validates return values against the function's
            return annotation (`typing.Any` when it has none).
        flow: Its rate limit, concurrency limit and fairness key (`FlowPolicy`);
            ``flow.active`` is False for a task without any.
        priority: Default priority of its dispatches, 0 (lowest) to 9.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str,
        max_retries: int | None,
        timeout_seconds: float | None,
        unique_for: float | timedelta | None = None,
        unique_key: UniqueKeyFunc | None = None,
        store_result: bool = False,
        result_ttl: float | timedelta = DEFAULT_RESULT_TTL_SECONDS,
        limits: FlowOptions | None = None,
        priority: int = PRIORITY_MIN,
    ) -> None:
        if not _TASK_NAME.fullmatch(name):
            raise ConfigurationError(
                f"task name {name!r} must be 1-200 characters without spaces or braces",
                setting="name",
            )
        if max_retries is not None:
            _check_count(
                f"task {name!r}: max_retries", max_retries, minimum=0, setting="max_retries"
            )
            if max_retries < 0:
                raise ConfigurationError(
                    f"task {name!r}: max_retries={max_retries} must be >= 0 (0 means no retry)",
                    setting="max_retries",
                )
        if timeout_seconds is not None:
            timeout: Any = timeout_seconds
            if (
                isinstance(timeout, bool)
                or not isinstance(timeout, int | float)
                or math.isinf(timeout)
            ):
                raise ConfigurationError(
                    f"task {name!r}: timeout_seconds={timeout_seconds!r} must be a finite "
                    "number of seconds (or None)",
                    setting="timeout_seconds",
                )
            if not timeout > 0:
                raise ConfigurationError(
                    f"task {name!r}: timeout_seconds={timeout_seconds} must be > 0 (or None)",
                    setting="timeout_seconds",
                )
        if unique_key is not None and not callable(unique_key):
            raise ConfigurationError(
                f"task {name!r}: unique_key must be a function of the payload",
                setting="unique_key",
            )
        self.unique_for = _unique_seconds(name, unique_for)
        self.flow = FlowPolicy(name, **(limits or {}))
        self.priority = check_priority(priority, task=name)
        if self.priority and self.flow.active:
            raise ConfigurationError(
                f"task {name!r}: priority goes without rate_limit, concurrency_limit and "
                "fairness_key (limited messages are admitted in their keys' turns)",
                setting="priority",
            )
        self.unique_key = unique_key
        self.is_unique = unique_for is not None or unique_key is not None
        self.name = name
        self.func = func
        self.is_async = inspect.iscoroutinefunction(func)
        self.max_retries = max_retries
        self.timeout_seconds = timeout_seconds
        self.takes_payload, payload_type = _payload_type(func, name)
        self.codec = PayloadCodec(name, payload_type)
        if not isinstance(store_result, bool):
            raise ConfigurationError(
                f"task {name!r}: store_result={store_result!r} must be True or False",
                setting="store_result",
            )
        self.store_result = store_result
        self.result_ttl = _result_ttl(f"task {name!r}: result_ttl", result_ttl)
        try:
            self.result_codec = PayloadCodec(name, _return_type(func), what="result")
        except TypeError:
            if store_result:
                raise
            # Results are not stored: a return annotation msgspec cannot represent
            # (a user class, say) must not break a task that never needed it.
            self.result_codec = PayloadCodec(name, Any, what="result")

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
        store_results: Default of ``store_result`` for tasks registered on this app.
        result_ttl: Default of ``result_ttl`` (seconds or a timedelta) for its tasks.
    """

    def __init__(
        self,
        queue: str = "default",
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        store_results: bool = False,
        result_ttl: float | timedelta = DEFAULT_RESULT_TTL_SECONDS,
    ) -> None:
        check_queue_name(queue, setting="queue")
        if not _QUEUE_NAME.fullmatch(queue):
            raise ConfigurationError(
                f"queue name {queue!r} must be 1-100 characters of letters, digits, '_.:-'",
                setting="queue",
            )
        _check_count("max_message_bytes", max_message_bytes, setting="max_message_bytes")
        if max_message_bytes < 1:
            raise ConfigurationError(
                f"max_message_bytes={max_message_bytes} must be >= 1",
                setting="max_message_bytes",
            )
        if not isinstance(store_results, bool):
            raise ConfigurationError(
                f"store_results={store_results!r} must be True or False",
                setting="store_results",
            )
        self.queue = queue
        self.max_message_bytes = max_message_bytes
        self.store_results = store_results
        self.result_ttl = _result_ttl("result_ttl", result_ttl)
        self._tasks: dict[str, Task[Any]] = {}
        self._schedules: dict[str, Schedule] = {}

    @property
    def tasks(self) -> Mapping[str, Task[Any]]:
        """Registered tasks by name (read-only view)."""
        return self._tasks

    @property
    def schedules(self) -> Mapping[str, Schedule]:
        """Periodic schedules by name (read-only view)."""
        return self._schedules

    def schedule(
        self,
        name: str,
        task: Task[Any] | str,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        payload: Any = None,
        timezone: str = "UTC",
        catch_up: CatchUp = "latest",
    ) -> Schedule:
        """Fire `task` with `payload` periodically, from whichever worker leads.

        Every `taskrunner.Runner` of this app on a backend with ``leadership`` runs
        a scheduler; one of them is elected leader and fires each due instant exactly
        once (see docs/scheduling.md for the guarantees and their limits). The task
        sees the instant as ``taskrunner.current_task().scheduled_for``.

        Args:
            name: Unique per app; fire records are kept under it, so renaming a
                schedule starts it afresh.
            task: The task (or its registered name).
            cron: A cron expression read in `timezone`: 5 fields (minute hour
                day-of-month month day-of-week), or 6 with a leading seconds field.
            every: A fixed period (>= 1 s); instants are its multiples since the Unix
                epoch. Exactly one of `cron` and `every`.
            payload: The payload each run gets, validated now against the task's type.
            timezone: IANA zone of the cron expression (default UTC).
            catch_up: Instants missed while no leader ran: ``"latest"`` fires the most
                recent one, ``"all"`` fires each in order (at most 1000, the latest),
                ``"none"`` skips them. A schedule never fired starts with its first
                instant after a leader first sees it.

        Raises:
            ConfigurationError: A bad or duplicate name, both or neither of `cron`
                and `every`, a bad expression or period, an unknown zone or policy.
            UnknownTaskError: `task` is a name no task has.
            PayloadValidationError: `payload` does not match the task's type.
            PayloadTooLargeError: The message would exceed ``max_message_bytes``.
        """
        checked: Any = name
        if not isinstance(checked, str) or not _SCHEDULE_NAME.fullmatch(checked):
            raise ConfigurationError(
                f"schedule name {name!r} must be 1-200 characters without spaces or braces",
                setting="name",
            )
        if name in self._schedules:
            raise ConfigurationError(
                f"a schedule named {name!r} is already defined on queue {self.queue!r}",
                setting="name",
            )
        resolved = self.get_task(task) if isinstance(task, str) else task
        if self._tasks.get(resolved.name) is not resolved:
            raise ConfigurationError(
                f"schedule {name!r}: task {resolved.name!r} is not registered on this app",
                setting="task",
            )
        timing = Timing.build(name, cron=cron, every=every, timezone=timezone)
        policy = check_catch_up(name, catch_up)
        encoded = resolved.codec.encode(payload)
        # Size-checked now, with an envelope as large as a firing makes, so a schedule
        # never fails at its first instant.
        encode_envelope(
            Envelope(
                id="0" * 32,
                task=resolved.name,
                payload=encoded,
                enqueued_at=4e9,
                scheduled_for=4e9,
            ),
            max_bytes=self.max_message_bytes,
        )
        schedule = Schedule(
            name=name,
            task_name=resolved.name,
            payload=bytes(encoded),
            timing=timing,
            catch_up=policy,
        )
        self._schedules[name] = schedule
        return schedule

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
        unique_for: float | timedelta | None = None,
        unique_key: UniqueKeyFunc | None = None,
        store_result: bool | None = None,
        result_ttl: float | timedelta | None = None,
        rate_limit: str | None = None,
        rate_burst: int | None = None,
        rate_limit_key: FlowKeyFunc | None = None,
        concurrency_limit: int | None = None,
        concurrency_key: FlowKeyFunc | None = None,
        fairness_key: FlowKeyFunc | None = None,
        priority: int = PRIORITY_MIN,
    ) -> _TaskDecorator: ...

    def task(
        self,
        func: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        max_retries: int | None = None,
        timeout_seconds: float | None = None,
        unique_for: float | timedelta | None = None,
        unique_key: UniqueKeyFunc | None = None,
        store_result: bool | None = None,
        result_ttl: float | timedelta | None = None,
        rate_limit: str | None = None,
        rate_burst: int | None = None,
        rate_limit_key: FlowKeyFunc | None = None,
        concurrency_limit: int | None = None,
        concurrency_key: FlowKeyFunc | None = None,
        fairness_key: FlowKeyFunc | None = None,
        priority: int = PRIORITY_MIN,
    ) -> Task[Any] | _TaskDecorator:
        """Register a function as a task; use as ``@app.task`` or ``@app.task(...)``.

        Args:
            func: The function (when used without parentheses).
            name: Name on the wire; defaults to ``module.qualname`` of the function.
            max_retries: Retries after the first failed attempt; 0 means none.
            timeout_seconds: Time limit of one attempt.
            unique_for: Makes every dispatch unique by default, its key held at most
                this long (seconds or a timedelta) after the dispatch; see
                `Producer.dispatch`.
            unique_key: Makes every dispatch unique by default, keyed by
                ``f"{task name}:{unique_key(payload)}"``.
            store_result: Store the outcome (return value, encoded against the return
                annotation, or the terminal failure) for `Producer.result` and
                `Producer.status`; None takes the app's ``store_results``.
            result_ttl: How long a stored result is kept (seconds or a timedelta);
                None takes the app's ``result_ttl``.
            rate_limit: At most this many attempts start per period across every
                worker and process: ``"100/s"``, ``"30/m"``, ``"5/h"``, ``"10/5s"``.
                A message over the limit waits (it is not leased, spends no attempt).
            rate_burst: How many may start at once before the rate applies (default 1).
            rate_limit_key: One independent rate per ``rate_limit_key(payload)``.
            concurrency_limit: At most this many attempts run at once across every
                worker and process; a slot is held until the attempt's final outcome
                or retry, and passes with a crashed worker's message to its reclaimer.
            concurrency_key: One independent concurrency limit per
                ``concurrency_key(payload)`` ("at most 2 per customer").
            fairness_key: Keys that take turns (round-robin) when they have waiting
                messages, so one key's backlog delays no other key. Limited tasks
                need a backend that claims ``flow_control`` (memory, Redis, Redis
                Cluster); a key function runs at dispatch, and its key is prefixed by
                the task name. See docs/flow-control.md.
            priority: Default priority of its dispatches: 0 (the default, lowest) to 9;
                a receive leases higher priorities first (docs/flow-control.md). A
                dispatch's own ``priority=`` wins. Not with the flow options above.

        Raises:
            ConfigurationError: A bad name or setting, or a name registered twice.
            TypeError: The function takes more than one required argument, or its
                payload type (or, with ``store_result``, its return type) cannot be
                represented as JSON.
        """
        decorator = _TaskDecorator(
            self,
            name=name,
            max_retries=max_retries,
            timeout_seconds=timeout_seconds,
            unique_for=unique_for,
            unique_key=unique_key,
            store_result=self.store_results if store_result is None else store_result,
            result_ttl=self.result_ttl if result_ttl is None else result_ttl,
            limits=FlowOptions(
                rate_limit=rate_limit,
                rate_burst=rate_burst,
                rate_limit_key=rate_limit_key,
                concurrency_limit=concurrency_limit,
                concurrency_key=concurrency_key,
                fairness_key=fairness_key,
            ),
            priority=priority,
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
        unique_for: float | timedelta | None,
        unique_key: UniqueKeyFunc | None,
        store_result: bool,
        result_ttl: float | timedelta,
        limits: FlowOptions,
        priority: int,
    ) -> None:
        self._app = app
        self._limits = limits
        self._priority = priority
        self._store_result = store_result
        self._result_ttl = result_ttl
        self._name = name
        self._max_retries = max_retries
        self._timeout_seconds = timeout_seconds
        self._unique_for = unique_for
        self._unique_key = unique_key

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
            unique_for=self._unique_for,
            unique_key=self._unique_key,
            store_result=self._store_result,
            result_ttl=self._result_ttl,
            limits=self._limits,
            priority=self._priority,
        )
        self._app._register(task)
        return task


def check_priority(priority: object, *, task: str | None = None) -> int:
    """`priority` if it is a whole number from 0 to 9 (higher runs first).

    Raises:
        ConfigurationError: Not an int in that range (a bool is not one).
    """
    where = f"task {task!r}: " if task is not None else ""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ConfigurationError(
            f"{where}priority={priority!r} must be a whole number from {PRIORITY_MIN} to "
            f"{PRIORITY_MAX}, not {type(priority).__name__}",
            setting="priority",
        )
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ConfigurationError(
            f"{where}priority={priority} must be from {PRIORITY_MIN} (the default, "
            f"lowest) to {PRIORITY_MAX} (highest)",
            setting="priority",
        )
    return priority


def _check_count(what: str, value: object, *, setting: str, minimum: int = 1) -> None:
    """Refuse a count that is no int: a float (1.5 retries) or a bool is a mistake."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(
            f"{what}={value!r} must be a whole number (an int >= {minimum}), "
            f"not {type(value).__name__}",
            setting=setting,
        )


def _unique_seconds(name: str, value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    return _positive_seconds(f"task {name!r}: unique_for", value, setting="unique_for")


def _result_ttl(what: str, value: float | timedelta) -> float:
    return _positive_seconds(what, value, setting="result_ttl")


def _positive_seconds(what: str, value: float | timedelta, *, setting: str) -> float:
    """`value` as float seconds > 0, or a ConfigurationError naming `what`."""
    seconds: Any = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or not seconds > 0
    ):
        raise ConfigurationError(
            f"{what}={value!r} must be a positive number of seconds or a timedelta",
            setting=setting,
        )
    return float(seconds)


def _return_type(func: Callable[..., Any]) -> Any:
    """The declared return type of `func` (Any when unannotated or not resolvable)."""
    try:
        hints = get_type_hints(func)
    except NameError:
        # Already reported by _payload_type when it is the payload's annotation; an
        # unresolvable return annotation only loses the result's validation.
        return Any
    return hints.get("return", Any)


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
