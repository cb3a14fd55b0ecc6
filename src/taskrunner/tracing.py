"""OpenTelemetry tracing of dispatches and attempts (extra ``taskrunner-queue[otel]``).

Follows the OpenTelemetry messaging semantic conventions (v1.44, status
"development"); docs/tracing.md lists every span and attribute.

- `dispatching`: the producer's "send {queue}" span (kind PRODUCER) around one
  dispatch of one or more messages. Its context is the messages' *creation
  context*: injected, through the global propagator (W3C ``traceparent`` and
  ``tracestate`` by default), into the headers of every message it sends.
- `tracing_observer`: an `AttemptObserver` that opens one "process {queue}" span
  (kind CONSUMER) per delivery. Its parent is the creation context found in the
  message's headers, so a task's execution shares the dispatcher's trace id; it
  also links to that context, as the conventions ask of process spans. The span is
  made current while the task runs, so spans the task's code opens (on the loop or
  in the worker thread of a plain ``def`` task) are its children.

Without ``opentelemetry-api`` installed, `dispatching` yields an empty dict and
`tracing_observer` returns None; opentelemetry is looked up once, at import. With
the API but no SDK configured, no span is started and only a context already
current is passed on (what the API's no-op spans would do, for a fraction of their
cost: docs/tracing.md has the measurements). Spans come from the global tracer
provider; while none is set it is looked for again at most once a second, so one set
after taskrunner was imported is used from then on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, suppress
from contextvars import Token
from types import TracebackType
from typing import Any, Final

from taskrunner.attempts import Attempt, AttemptObserver, Outcome

try:
    from opentelemetry import context as otel_context, propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.propagators.textmap import Getter
except ImportError:  # the [otel] extra is not installed
    OTEL_AVAILABLE = False
else:
    OTEL_AVAILABLE = True

__all__ = ["dispatching", "tracing_observer"]

# Attribute names of the messaging semantic conventions (v1.44), spelt out instead of
# imported: opentelemetry-semantic-conventions is a beta package the API does not need.
SYSTEM: Final = "messaging.system"
DESTINATION: Final = "messaging.destination.name"
OPERATION_NAME: Final = "messaging.operation.name"
OPERATION_TYPE: Final = "messaging.operation.type"
BATCH_COUNT: Final = "messaging.batch.message_count"
MESSAGE_ID: Final = "messaging.message.id"
CLIENT_ID: Final = "messaging.client.id"
ERROR_TYPE: Final = "error.type"
# Ours, under the library's own prefix: the conventions reserve "messaging.{system}"
# for systems they define.
TASK_NAME: Final = "taskrunner.task.name"
TASK_ID: Final = "taskrunner.task.id"
DELIVERY_COUNT: Final = "taskrunner.delivery_count"
OUTCOME: Final = "taskrunner.outcome"

SYSTEM_NAME: Final = "taskrunner"

# A traceparent is 55 characters (version 00), and the API refuses more than 512 with
# a warning; other headers (tracestate, baggage) are refused past 8192. Longer values
# in a message are hostile or broken: they are ignored here, before any propagator
# parses them or logs a warning for every delivery.
_MAX_TRACEPARENT_CHARS = 512
_MAX_HEADER_CHARS = 8192

# Task names and ids come from the message body: a hostile one can be as long as the
# message. Attributes are kept to this many characters.
_MAX_ATTRIBUTE_CHARS = 1000

# Failed attempts. CANCELLED is not among them: a shutdown gave the message back for
# redelivery, nothing went wrong with it (its span says so in taskrunner.outcome).
_FAILED: Final = frozenset(
    {
        Outcome.RETRIED,
        Outcome.DEAD_LETTERED,
        Outcome.HANDLED,
        Outcome.LOST,
        Outcome.UNSETTLED,
    }
)


class _NoTrace:
    """`dispatching` without OpenTelemetry: no span, no headers."""

    __slots__ = ()

    def __enter__(self) -> dict[str, str]:
        return {}

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None


_NO_TRACE: Final = _NoTrace()


def dispatching(queue: str, task: str, count: int) -> AbstractContextManager[dict[str, str]]:
    """A producer span around one dispatch of `count` messages of `task`.

    Yields the trace-context headers to carry in each message (empty without
    OpenTelemetry, or without an SDK and a current context to pass on); the producer
    adds those its caller did not set itself. The span ("send {queue}", kind PRODUCER) is
    current inside the block, so a backend client's own instrumentation nests under
    it. An exception leaving the block is recorded on the span (status ERROR, an
    exception event, ``error.type``) and goes on unchanged.
    """
    if not OTEL_AVAILABLE or (_TRACERS.get() is None and not otel_context.get_current()):
        return _NO_TRACE  # no SDK, and no context of the caller's to pass on
    return _DispatchSpan(queue, task, count)


def tracing_observer(queue: str) -> AttemptObserver | None:
    """An observer that opens a consumer span per attempt, or None without OpenTelemetry.

    See the module docstring; the runner installs it by itself when OpenTelemetry is
    importable. Its calls never raise: trace headers that cannot be read (garbage,
    oversized) start a new trace instead.
    """
    if not OTEL_AVAILABLE:
        return None
    return _TracingObserver(queue)


if OTEL_AVAILABLE:
    try:
        from importlib.metadata import version as _version

        _LIBRARY_VERSION: str | None = _version("taskrunner-queue")
    except Exception:  # not installed as a distribution (a source checkout on sys.path)
        _LIBRARY_VERSION = None

    _SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.44.0"

    # No SDK configured (no global provider yet, or an explicit no-op one): every span
    # would be a non-recording one. Then nothing is started, and only the context
    # already current is passed on, which is all the no-op tracer's spans would do.
    _NO_OP_PROVIDERS: Final = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)

    def _tracer_provider() -> trace.TracerProvider:
        """The provider spans come from (a seam: tests put their own in its place)."""
        return trace.get_tracer_provider()

    class _TracerCache:
        """The tracer of the provider seen last, and when to look for a provider again.

        Asking the API for the global provider takes microseconds while none is set
        (it reads the environment each time), as much as the rest of a no-op span: so
        without one it is asked again at most every `_RECHECK_SECONDS`. Once one is
        set it is asked on every call (cheap then), and its tracer is kept, since the
        SDK builds a new one per `get_tracer`.
        """

        __slots__ = ("next_check", "provider", "tracer")

        def __init__(self) -> None:
            self.provider: trace.TracerProvider | None = None
            self.tracer: trace.Tracer | None = None
            self.next_check = -math.inf

        def get(self) -> trace.Tracer | None:
            """The tracer to use now, or None when spans would not be recorded."""
            if self.tracer is None:
                now = _monotonic()
                if now < self.next_check:
                    return None
                self.next_check = now + _RECHECK_SECONDS
            provider = _tracer_provider()
            if isinstance(provider, _NO_OP_PROVIDERS):
                self.provider = self.tracer = None
                return None
            if provider is not self.provider or self.tracer is None:
                self.tracer = provider.get_tracer("taskrunner", _LIBRARY_VERSION, _SCHEMA_URL)
                self.provider = provider
            return self.tracer

    # How soon a global tracer provider set after the first dispatch or attempt is used.
    _RECHECK_SECONDS: Final = 1.0
    _monotonic = time.monotonic
    _TRACERS = _TracerCache()

    class _BoundedGetter(Getter[Mapping[str, str]]):
        """Reads message headers for a propagator; oversized or non-str values read as absent."""

        def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
            value = carrier.get(key)
            if not isinstance(value, str):
                return None
            limit = _MAX_TRACEPARENT_CHARS if key == "traceparent" else _MAX_HEADER_CHARS
            return [value] if len(value) <= limit else None

        def keys(self, carrier: Mapping[str, str]) -> list[str]:
            return list(carrier)

    _GETTER: Final = _BoundedGetter()

    def _inject(context: Context) -> dict[str, str]:
        headers: dict[str, str] = {}
        try:
            propagate.inject(headers, context=context)
        except Exception:  # a broken third-party propagator: send without context
            return {}
        return headers

    def _extract(headers: Mapping[str, str], base: Context) -> Context:
        if not headers:
            return base  # the common case without tracing upstream: nothing to parse
        try:
            return propagate.extract(headers, context=base, getter=_GETTER)
        except Exception:  # a third-party propagator's bug on hostile headers
            return base

    class _DispatchSpan:
        """`dispatching` with OpenTelemetry (a class: cheaper than a generator)."""

        __slots__ = ("_count", "_queue", "_span", "_task", "_token")

        def __init__(self, queue: str, task: str, count: int) -> None:
            self._queue = queue
            self._task = task
            self._count = count
            self._span: trace.Span | None = None
            self._token: Token[Context] | None = None

        def __enter__(self) -> dict[str, str]:
            current = otel_context.get_current()
            tracer = _TRACERS.get()
            if tracer is None:
                # No SDK: pass on the caller's context, if there is one at all.
                return _inject(current) if current else {}
            attributes: dict[str, Any] = {
                SYSTEM: SYSTEM_NAME,
                DESTINATION: self._queue,
                OPERATION_NAME: "send",
                OPERATION_TYPE: "send",
                TASK_NAME: self._task,
            }
            if self._count != 1:
                # dispatch_many; the conventions keep the count off single-message spans.
                attributes[BATCH_COUNT] = self._count
            span = tracer.start_span(
                f"send {self._queue}",
                context=current,
                kind=trace.SpanKind.PRODUCER,
                attributes=attributes,
            )
            context = trace.set_span_in_context(span, current)
            self._span = span
            self._token = otel_context.attach(context)
            return _inject(context)

        def __exit__(
            self,
            exc_type: type[BaseException] | None,
            exc: BaseException | None,
            traceback: TracebackType | None,
        ) -> None:
            span, token = self._span, self._token
            if span is None or token is None:
                return
            try:
                if exc is not None:
                    # Cancellation too: the caller cannot tell whether the messages went.
                    _record_error(span, type(exc).__name__, _message(exc), exc)
            finally:
                otel_context.detach(token)
                span.end()

    class _TracingObserver:
        """Opens a consumer span per attempt and makes it current while the task runs."""

        __slots__ = ("_name", "_queue")

        def __init__(self, queue: str) -> None:
            self._queue = queue
            self._name = f"process {queue}"

        def attempt_started(self, attempt: Attempt) -> object:
            tracer = _TRACERS.get()
            if tracer is None and not attempt.headers:
                return None  # no SDK and nothing to pass on: the cheapest way out
            ambient = otel_context.get_current()
            around = trace.get_current_span(ambient).get_span_context()
            # The creation context alone decides the parent: a span that happens to be
            # current in the worker (one around runner.run(), say) must not become the
            # parent of every message, nor should a message without context join it.
            base = (
                trace.set_span_in_context(trace.INVALID_SPAN, ambient)
                if around.is_valid
                else ambient
            )
            parent = _extract(attempt.headers, base)
            if tracer is None:
                # No SDK: only pass the creation context on to what the task calls.
                return otel_context.attach(parent) if parent is not base else None
            creation = trace.get_current_span(parent).get_span_context()
            links = []
            if creation.is_valid:
                links.append(trace.Link(creation))
            if around.is_valid:
                # The conventions ask for a link to the ambient span when the creation
                # context is the parent instead of it.
                links.append(trace.Link(around))
            attributes: dict[str, Any] = {
                SYSTEM: SYSTEM_NAME,
                DESTINATION: self._queue,
                OPERATION_NAME: "process",
                OPERATION_TYPE: "process",
                MESSAGE_ID: attempt.message_id,
                CLIENT_ID: attempt.consumer,
                DELIVERY_COUNT: attempt.delivery_count,
            }
            if attempt.task is not None:
                attributes[TASK_NAME] = attempt.task[:_MAX_ATTRIBUTE_CHARS]
            if attempt.task_id is not None:
                attributes[TASK_ID] = attempt.task_id[:_MAX_ATTRIBUTE_CHARS]
            span = tracer.start_span(
                self._name,
                context=parent,
                kind=trace.SpanKind.CONSUMER,
                attributes=attributes,
                links=links,
            )
            # Attached last: nothing after it can fail and leave it attached.
            return span, otel_context.attach(trace.set_span_in_context(span, parent))

        def attempt_finished(self, attempt: Attempt, token: object) -> None:
            if token is None:
                return  # nothing was started or attached
            if isinstance(token, Token):
                otel_context.detach(token)  # no SDK: only a context was attached
                return
            if not isinstance(token, tuple):
                return  # nothing was started
            span, attached = token
            try:
                outcome = attempt.outcome
                if outcome is not None:
                    span.set_attribute(OUTCOME, outcome.value)
                if outcome in _FAILED:
                    _settle_failure(span, attempt)
            finally:
                otel_context.detach(attached)
                span.end()

    def _settle_failure(span: trace.Span, attempt: Attempt) -> None:
        error = attempt.error
        description = attempt.description or ""
        if error is not None:
            kind = type(error).__name__
            # The executor's description is "Type: message"; the status carries the message.
            description = description.removeprefix(f"{type(error).__name__}: ")
        else:
            # No exception (a lost lease, a failed ack, a body that could not be read):
            # the outcome is the class of error, of low cardinality as asked.
            kind = attempt.outcome.value if attempt.outcome is not None else "_OTHER"
        _record_error(span, kind, description, error)

    def _record_error(
        span: trace.Span, kind: str, description: str, error: BaseException | None
    ) -> None:
        span.set_attribute(ERROR_TYPE, kind)
        span.set_status(trace.Status(trace.StatusCode.ERROR, description or None))
        if error is not None:
            # str() of a hostile exception may raise; the status then says enough.
            with suppress(Exception):
                span.record_exception(error)

    def _message(error: BaseException) -> str:
        try:
            text = str(error)
        except Exception:
            return type(error).__name__
        return text if len(text) <= 2000 else text[:2000] + "..."
