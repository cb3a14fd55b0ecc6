"""OpenTelemetry tracing: producer spans, consumer spans per attempt, context propagation.

Spans go to the SDK's in-memory exporter of a provider made per test and put in
`taskrunner.tracing` in place of its tracer, so no test sets the global provider (the
API allows that once per process); two subprocess tests cover the global provider and
an environment without OpenTelemetry.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings, strategies as st
from opentelemetry import baggage, context as otel_context, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Sampler
from opentelemetry.trace import SpanKind, StatusCode

from taskrunner import (
    Attempt,
    AttemptObserver,
    Outcome,
    PayloadValidationError,
    Producer,
    current_task,
    tracing,
)
from taskrunner.producer import encode_message
from taskrunner.testing import FakeClock, run_until_idle

from .support import config, make

ROOT = Path(__file__).resolve().parents[1]

# A caller's own creation context (the W3C specification's example).
CUSTOM = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
CUSTOM_IDS = (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)


class Order(msgspec.Struct):
    sku: str
    quantity: int


class Traces:
    """The spans a test's provider finished, and a tracer for the test's own spans."""

    def __init__(self, sampler: Sampler | None = None) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(sampler=sampler)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.named(name)
        return span


@pytest.fixture
def traces(monkeypatch: pytest.MonkeyPatch) -> Iterator[Traces]:
    found = Traces()
    monkeypatch.setattr(tracing, "_tracer_provider", lambda: found.provider)
    monkeypatch.setattr(tracing, "_TRACERS", tracing._TracerCache())
    yield found
    found.provider.shutdown()


def ids(span: ReadableSpan) -> tuple[int, int]:
    assert span.context is not None
    return span.context.trace_id, span.context.span_id


def parent_of(span: ReadableSpan) -> tuple[int, int] | None:
    if span.parent is None:
        return None
    return span.parent.trace_id, span.parent.span_id


def linked(span: ReadableSpan) -> list[tuple[int, int]]:
    return [(link.context.trace_id, link.context.span_id) for link in span.links]


def no_observer_errors(caplog: pytest.LogCaptureFixture) -> None:
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [m for m in messages if "observer" in m or "header" in m], messages


async def test_execution_span_is_a_child_of_the_dispatch_span_in_the_same_trace(
    traces: Traces,
) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    seen: list[dict[str, str]] = []

    @app.task(name="ship")
    async def ship(order: Order) -> None:
        seen.append(dict(current_task().headers))

    message_id = await Producer(queue, app, clock=clock).dispatch(ship, Order("x-1", 2))
    await run_until_idle(app, queue, clock=clock, config=config())

    send = traces.one("send tests")
    process = traces.one("process tests")
    assert send.kind is SpanKind.PRODUCER
    assert process.kind is SpanKind.CONSUMER
    assert ids(process)[0] == ids(send)[0]
    assert parent_of(process) == ids(send)
    assert linked(process) == [ids(send)]
    # The message carried the send span's context, W3C style.
    (headers,) = seen
    trace_id, span_id = ids(send)
    prefix, flags = headers["traceparent"].rsplit("-", 1)
    assert prefix == f"00-{trace_id:032x}-{span_id:016x}"
    assert int(flags, 16) & 1  # sampled
    assert dict(send.attributes or {}) == {
        "messaging.system": "taskrunner",
        "messaging.destination.name": "tests",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "taskrunner.task.name": "ship",
    }
    attributes = dict(process.attributes or {})
    consumer = attributes.pop("messaging.client.id")
    task_id = attributes.pop("taskrunner.task.id")
    assert isinstance(consumer, str)
    assert consumer.startswith("tests:")
    assert isinstance(task_id, str)
    assert task_id
    assert attributes == {
        "messaging.system": "taskrunner",
        "messaging.destination.name": "tests",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.message.id": message_id,
        "taskrunner.task.name": "ship",
        "taskrunner.delivery_count": 1,
        "taskrunner.outcome": "succeeded",
    }
    # Success leaves the status unset (OK is for applications to set), with no events.
    assert process.status.status_code is StatusCode.UNSET
    assert send.status.status_code is StatusCode.UNSET
    assert process.events == ()


async def test_a_span_the_task_opens_is_a_child_of_the_process_span(traces: Traces) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)

    @app.task
    async def work() -> None:
        with traces.tracer.start_as_current_span("inside"):
            pass

    await Producer(queue, app, clock=clock).dispatch(work)
    await run_until_idle(app, queue, clock=clock, config=config())

    inside = traces.one("inside")
    process = traces.one("process tests")
    assert parent_of(inside) == ids(process)
    assert ids(inside)[0] == ids(traces.one("send tests"))[0]
    # The context was detached after the attempt: nothing leaks into the test's own.
    assert not trace.get_current_span().get_span_context().is_valid


async def test_a_span_opened_in_a_plain_def_tasks_thread_sees_the_process_span(
    traces: Traces,
) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    threads: list[int] = []

    @app.task
    def blocking() -> None:
        threads.append(threading.get_ident())
        with traces.tracer.start_as_current_span("in thread"):
            pass

    await Producer(queue, app, clock=clock).dispatch(blocking)
    await run_until_idle(app, queue, clock=clock, config=config())

    assert threads != [threading.get_ident()]
    assert parent_of(traces.one("in thread")) == ids(traces.one("process tests"))


async def test_a_span_in_an_async_task_with_a_timeout_sees_the_process_span(
    traces: Traces,
) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)

    @app.task(timeout_seconds=30)
    async def bounded() -> None:
        with traces.tracer.start_as_current_span("bounded"):
            pass

    await Producer(queue, app, clock=clock).dispatch(bounded)
    await run_until_idle(app, queue, clock=clock, config=config())

    assert parent_of(traces.one("bounded")) == ids(traces.one("process tests"))


async def test_a_failing_task_gives_an_error_status_and_an_exception_event(
    traces: Traces,
) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)

    @app.task(max_retries=0)
    async def broken() -> None:
        raise ValueError("cannot ship x-1")

    await Producer(queue, app, clock=clock).dispatch(broken)
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config())

    process = traces.one("process tests")
    assert process.status.status_code is StatusCode.ERROR
    assert process.status.description == "cannot ship x-1"
    attributes = process.attributes or {}
    assert attributes["error.type"] == "ValueError"
    assert attributes["taskrunner.outcome"] == "dead_lettered"
    (event,) = process.events
    assert event.name == "exception"
    event_attributes = event.attributes or {}
    assert event_attributes["exception.type"] == "ValueError"
    assert event_attributes["exception.message"] == "cannot ship x-1"
    assert "cannot ship x-1" in str(event_attributes["exception.stacktrace"])


async def test_each_retry_is_its_own_process_span_in_the_dispatch_trace(traces: Traces) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)

    @app.task(max_retries=3)
    async def flaky() -> None:
        if current_task().delivery_count < 3:
            raise RuntimeError("try later")

    await Producer(queue, app, clock=clock).dispatch(flaky)
    await run_until_idle(app, queue, clock=clock, config=config())

    send = traces.one("send tests")
    processes = sorted(
        traces.named("process tests"),
        key=lambda span: int(str((span.attributes or {})["taskrunner.delivery_count"])),
    )
    summary = [
        (
            (span.attributes or {})["taskrunner.delivery_count"],
            (span.attributes or {})["taskrunner.outcome"],
            span.status.status_code,
            len(span.events),
        )
        for span in processes
    ]
    assert summary == [
        (1, "retried", StatusCode.ERROR, 1),
        (2, "retried", StatusCode.ERROR, 1),
        (3, "succeeded", StatusCode.UNSET, 0),
    ]
    assert {parent_of(span) for span in processes} == {ids(send)}
    assert len({ids(span) for span in processes}) == 3


async def test_dispatch_many_is_one_send_span_with_the_batch_count(traces: Traces) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)

    @app.task
    async def ship(order: Order) -> None:
        pass

    sent = await Producer(queue, app, clock=clock).dispatch_many(
        ship, [Order(f"x-{n}", n) for n in range(3)]
    )
    await run_until_idle(app, queue, clock=clock, config=config())

    send = traces.one("send tests")
    assert (send.attributes or {})["messaging.batch.message_count"] == 3
    processes = traces.named("process tests")
    assert sorted(str((s.attributes or {})["messaging.message.id"]) for s in processes) == sorted(
        sent
    )
    assert {parent_of(span) for span in processes} == {ids(send)}


async def test_an_empty_dispatch_many_still_counts_zero(traces: Traces) -> None:
    clock = FakeClock()
    app, queue = make(clock)

    @app.task
    async def ship(order: Order) -> None:
        pass

    assert await Producer(queue, app, clock=clock).dispatch_many(ship, []) == []
    assert (traces.one("send tests").attributes or {})["messaging.batch.message_count"] == 0


async def test_a_failed_dispatch_is_recorded_on_its_span_and_raised(traces: Traces) -> None:
    clock = FakeClock()
    app, queue = make(clock)

    @app.task(name="ship")
    async def ship(order: Order) -> None:
        pass

    with pytest.raises(PayloadValidationError):
        await Producer(queue, app, clock=clock).dispatch("ship", {"sku": 1})

    send = traces.one("send tests")
    assert send.status.status_code is StatusCode.ERROR
    assert (send.attributes or {})["error.type"] == "PayloadValidationError"
    (event,) = send.events
    assert event.name == "exception"
    assert await queue.len() == 0
    assert not trace.get_current_span().get_span_context().is_valid


async def test_the_callers_own_traceparent_wins_over_the_injected_one(traces: Traces) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)

    @app.task
    async def work() -> None:
        pass

    await Producer(queue, app, clock=clock).dispatch(work, headers={"traceparent": CUSTOM})
    await run_until_idle(app, queue, clock=clock, config=config())

    process = traces.one("process tests")
    assert parent_of(process) == CUSTOM_IDS
    assert linked(process) == [CUSTOM_IDS]


async def test_the_producers_baggage_is_current_in_the_task(traces: Traces) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    seen: list[object] = []

    @app.task
    async def work() -> None:
        seen.append(baggage.get_baggage("tenant"))

    token = otel_context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        await Producer(queue, app, clock=clock).dispatch(work)
    finally:
        otel_context.detach(token)
    await run_until_idle(app, queue, clock=clock, config=config())

    assert seen == ["acme"]
    assert parent_of(traces.one("process tests")) == ids(traces.one("send tests"))


async def test_an_unsampled_dispatch_leaves_its_attempts_unsampled(traces: Traces) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    seen: list[trace.SpanContext] = []

    @app.task
    async def work() -> None:
        seen.append(trace.get_current_span().get_span_context())

    unsampled = CUSTOM.removesuffix("-01") + "-00"
    await Producer(queue, app, clock=clock).dispatch(work, headers={"traceparent": unsampled})
    await run_until_idle(app, queue, clock=clock, config=config())

    # The SDK's default sampler follows the parent; the task still runs in its trace.
    assert traces.named("process tests") == []
    (context,) = seen
    assert context.trace_id == CUSTOM_IDS[0]
    assert not context.trace_flags.sampled


async def test_a_message_without_trace_context_starts_a_new_trace(traces: Traces) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)

    @app.task
    async def work() -> None:
        pass

    await queue.add([encode_message(app, work, None, clock=clock)])
    await run_until_idle(app, queue, clock=clock, config=config())

    process = traces.one("process tests")
    assert process.parent is None
    assert process.links == ()
    assert traces.named("send tests") == []


HOSTILE = {
    "garbage": {"traceparent": "garbage"},
    "empty": {"traceparent": ""},
    "zero ids": {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"},
    "version ff": {"traceparent": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    "huge traceparent": {"traceparent": "00-" + "a" * 200_000},
    "huge valid-looking traceparent": {
        "traceparent": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-" + "x" * 600
    },
    "unicode": {"traceparent": "00-\u0663" * 20, "tracestate": "\u00e9=\u2603"},
    "huge tracestate and baggage": {
        "traceparent": "garbage",
        "tracestate": "k=" + "v" * 100_000,
        "baggage": "b=" + "v" * 100_000,
    },
}


@pytest.mark.parametrize("headers", HOSTILE.values(), ids=HOSTILE.keys())
async def test_hostile_trace_headers_start_a_new_trace_without_raising(
    traces: Traces, caplog: pytest.LogCaptureFixture, headers: dict[str, str]
) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    ran: list[int] = []

    @app.task
    async def work() -> None:
        ran.append(current_task().delivery_count)

    # The caller's headers win, so these replace the dispatch span's own context.
    await Producer(queue, app, clock=clock).dispatch(work, headers=headers)
    with caplog.at_level(logging.WARNING):
        await run_until_idle(app, queue, clock=clock, config=config())

    assert ran == [1]
    process = traces.one("process tests")
    assert process.parent is None
    assert ids(process)[0] != ids(traces.one("send tests"))[0]
    assert (process.attributes or {})["taskrunner.outcome"] == "succeeded"
    no_observer_errors(caplog)


@pytest.mark.parametrize("tracestate", ["x" * 10_000, "not a member", "k=v,k=w"])
async def test_a_valid_traceparent_with_a_broken_tracestate_keeps_the_parent(
    traces: Traces, tracestate: str
) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)

    @app.task
    async def work() -> None:
        pass

    headers = {"traceparent": CUSTOM, "tracestate": tracestate}
    await Producer(queue, app, clock=clock).dispatch(work, headers=headers)
    await run_until_idle(app, queue, clock=clock, config=config())

    process = traces.one("process tests")
    assert parent_of(process) == CUSTOM_IDS
    assert process.context is not None
    assert len(process.context.trace_state) == 0


async def test_a_body_that_is_no_envelope_gets_a_root_span_with_an_error(traces: Traces) -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    await queue.add([b"not an envelope"])
    await run_until_idle(app, queue, clock=clock, fail_fast=False, config=config())

    process = traces.one("process tests")
    assert process.parent is None
    attributes = process.attributes or {}
    assert "taskrunner.task.name" not in attributes
    assert attributes["taskrunner.outcome"] == "dead_lettered"
    assert attributes["error.type"] == "dead_lettered"
    assert process.status.status_code is StatusCode.ERROR
    assert process.status.description


def attempt(**fields: object) -> Attempt:
    base: dict[str, object] = {
        "queue": "q",
        "message_id": "m-1",
        "delivery_count": 1,
        "consumer": "c-1",
        "task": "t",
    }
    return Attempt(**{**base, **fields})  # type: ignore[arg-type]


def observer() -> AttemptObserver:
    found = tracing.tracing_observer("q")
    assert found is not None
    return found


def test_an_ambient_span_is_linked_not_made_the_parent(traces: Traces) -> None:
    with traces.tracer.start_as_current_span("around runner") as around:
        with tracing.dispatching("q", "t", 1) as carrier:
            pass
        tracer = observer()
        current = attempt(headers=carrier)
        token = tracer.attempt_started(current)
        inside = trace.get_current_span()
        current.outcome = Outcome.SUCCEEDED
        tracer.attempt_finished(current, token)
        # Restored: the ambient span is current again.
        assert trace.get_current_span() is around

    send = traces.one("send q")
    process = traces.one("process q")
    assert inside.get_span_context() == process.context
    assert parent_of(process) == ids(send)
    assert linked(process) == [ids(send), ids(traces.one("around runner"))]
    # The send span was current in the caller's span, as any child would be.
    assert parent_of(send) == ids(traces.one("around runner"))


def test_an_ambient_span_is_not_the_parent_of_a_message_without_context(
    traces: Traces,
) -> None:
    tracer = observer()
    with traces.tracer.start_as_current_span("around runner"):
        current = attempt()
        tracer.attempt_finished(current, tracer.attempt_started(current))

    process = traces.one("process q")
    assert process.parent is None
    assert linked(process) == [ids(traces.one("around runner"))]
    assert ids(process)[0] != ids(traces.one("around runner"))[0]


@pytest.mark.parametrize(
    ("outcome", "status", "error_type"),
    [
        (Outcome.SUCCEEDED, StatusCode.UNSET, None),
        (Outcome.CANCELLED, StatusCode.UNSET, None),
        (Outcome.LOST, StatusCode.ERROR, "lost"),
        (Outcome.UNSETTLED, StatusCode.ERROR, "unsettled"),
        (Outcome.HANDLED, StatusCode.ERROR, "handled"),
        (None, StatusCode.UNSET, None),
    ],
)
def test_outcomes_without_an_exception_map_to_a_status(
    traces: Traces, outcome: Outcome | None, status: StatusCode, error_type: str | None
) -> None:
    tracer = observer()
    current = attempt()
    token = tracer.attempt_started(current)
    current.outcome = outcome
    current.description = None if error_type is None else "lease lapsed"
    tracer.attempt_finished(current, token)

    process = traces.one("process q")
    assert process.status.status_code is status
    attributes = process.attributes or {}
    assert attributes.get("error.type") == error_type
    assert attributes.get("taskrunner.outcome") == (None if outcome is None else outcome.value)
    assert process.events == ()


def test_an_exception_whose_str_raises_still_ends_the_span(traces: Traces) -> None:
    class HostileError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    tracer = observer()
    current = attempt()
    token = tracer.attempt_started(current)
    current.outcome = Outcome.RETRIED
    current.error = HostileError()
    current.description = "HostileError: ?"
    tracer.attempt_finished(current, token)

    process = traces.one("process q")
    assert process.status.status_code is StatusCode.ERROR
    assert (process.attributes or {})["error.type"] == "HostileError"
    assert not trace.get_current_span().get_span_context().is_valid


def test_a_huge_task_name_from_the_body_is_cut_in_the_attributes(traces: Traces) -> None:
    tracer = observer()
    current = attempt(task="t" * 100_000, task_id="i" * 100_000)
    tracer.attempt_finished(current, tracer.attempt_started(current))
    attributes = traces.one("process q").attributes or {}
    assert attributes["taskrunner.task.name"] == "t" * 1000
    assert attributes["taskrunner.task.id"] == "i" * 1000


HEADER_NAMES = st.sampled_from(["traceparent", "tracestate", "baggage", "b3", "x"])
TRACEPARENTISH = st.from_regex(
    r"\A[ \t]*[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?\Z", fullmatch=True
)


@settings(max_examples=300, deadline=None)
@given(
    headers=st.dictionaries(HEADER_NAMES, st.one_of(st.text(), TRACEPARENTISH), max_size=5),
    outcome=st.sampled_from(list(Outcome)),
)
def test_any_headers_give_one_ended_span_and_restore_the_context(
    headers: dict[str, str], outcome: Outcome
) -> None:
    # Sampled whatever the parent says: an unsampled parent would leave nothing to see.
    found = Traces(ALWAYS_ON)
    cache = tracing._TracerCache()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tracing, "_tracer_provider", lambda: found.provider)
        patch.setattr(tracing, "_TRACERS", cache)
        before = otel_context.get_current()
        tracer = observer()
        current = attempt(headers=headers)
        token = tracer.attempt_started(current)
        current.outcome = outcome
        tracer.attempt_finished(current, token)
        assert otel_context.get_current() == before
    (span,) = found.spans()
    assert span.end_time is not None
    assert (span.attributes or {})["taskrunner.outcome"] == outcome.value


def test_finish_without_a_start_token_does_nothing(traces: Traces) -> None:
    observer().attempt_finished(attempt(outcome=Outcome.SUCCEEDED), None)
    assert traces.spans() == []


def test_non_str_header_values_are_ignored(traces: Traces) -> None:
    tracer = observer()
    current = attempt(headers={"traceparent": 12, "tracestate": None})
    tracer.attempt_finished(current, tracer.attempt_started(current))
    assert traces.one("process q").parent is None


def test_a_cancelled_dispatch_is_an_error_on_its_span(traces: Traces) -> None:
    import asyncio

    with pytest.raises(asyncio.CancelledError), tracing.dispatching("q", "t", 1):
        raise asyncio.CancelledError
    send = traces.one("send q")
    assert send.status.status_code is StatusCode.ERROR
    assert (send.attributes or {})["error.type"] == "CancelledError"


def test_without_opentelemetry_dispatching_yields_nothing_and_there_is_no_observer(
    monkeypatch: pytest.MonkeyPatch, traces: Traces
) -> None:
    monkeypatch.setattr(tracing, "OTEL_AVAILABLE", False)
    with tracing.dispatching("q", "t", 1) as headers:
        assert headers == {}
        headers["x"] = "y"  # a fresh dict each time: no state shared between calls
    with tracing.dispatching("q", "t", 2) as headers:
        assert headers == {}
    with pytest.raises(KeyError), tracing.dispatching("q", "t", 1):
        raise KeyError("goes through")
    assert tracing.tracing_observer("q") is None
    assert traces.spans() == []


async def test_without_opentelemetry_the_runner_traces_nothing(
    monkeypatch: pytest.MonkeyPatch, traces: Traces
) -> None:
    monkeypatch.setattr(tracing, "OTEL_AVAILABLE", False)
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    seen: list[dict[str, str]] = []

    @app.task
    async def work() -> None:
        seen.append(dict(current_task().headers))

    await Producer(queue, app, clock=clock).dispatch(work)
    await run_until_idle(app, queue, clock=clock, config=config())
    assert seen == [{}]
    assert traces.spans() == []


@pytest.fixture
def no_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API as installed, no SDK: no test in this process sets a global provider."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    monkeypatch.setattr(tracing, "_TRACERS", tracing._TracerCache())


@pytest.mark.usefixtures("no_sdk")
def test_without_an_sdk_dispatching_passes_the_callers_context_on() -> None:
    with tracing.dispatching("q", "t", 1) as headers:
        assert headers == {}
    remote = trace.SpanContext(
        trace_id=CUSTOM_IDS[0],
        span_id=CUSTOM_IDS[1],
        is_remote=True,
        trace_flags=trace.TraceFlags(1),
    )
    token = otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(remote)))
    try:
        with tracing.dispatching("q", "t", 1) as headers:
            pass
    finally:
        otel_context.detach(token)
    assert headers == {"traceparent": CUSTOM}


@pytest.mark.usefixtures("no_sdk")
async def test_without_an_sdk_the_task_runs_in_the_creation_context() -> None:
    clock = FakeClock(autojump=True)
    app, queue = make(clock)
    seen: list[trace.SpanContext] = []

    @app.task
    async def work() -> None:
        seen.append(trace.get_current_span().get_span_context())

    await Producer(queue, app, clock=clock).dispatch(work, headers={"traceparent": CUSTOM})
    await Producer(queue, app, clock=clock).dispatch(work)
    await run_until_idle(app, queue, clock=clock, config=config())

    assert [(c.trace_id, c.span_id) for c in seen if c.is_valid] == [CUSTOM_IDS]
    assert len(seen) == 2
    assert not trace.get_current_span().get_span_context().is_valid


@pytest.mark.usefixtures("no_sdk")
def test_without_an_sdk_a_message_without_context_attaches_nothing() -> None:
    tracer = observer()
    assert tracer.attempt_started(attempt()) is None
    assert tracer.attempt_started(attempt(headers={"traceparent": "garbage"})) is None


def test_a_provider_set_later_is_used_from_the_next_check_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(tracing, "_monotonic", lambda: now[0])
    cache = tracing._TracerCache()
    monkeypatch.setattr(tracing, "_TRACERS", cache)
    found = Traces()
    providers: list[trace.TracerProvider] = [trace.NoOpTracerProvider()]
    monkeypatch.setattr(tracing, "_tracer_provider", lambda: providers[0])

    assert cache.get() is None
    providers[0] = found.provider
    now[0] = 100.0 + tracing._RECHECK_SECONDS - 0.001
    assert cache.get() is None
    now[0] = 100.0 + tracing._RECHECK_SECONDS
    first = cache.get()
    assert first is not None
    # Kept while the provider is the same; asked on every call from now on.
    now[0] = 100.0
    assert cache.get() is first
    other = Traces()
    providers[0] = other.provider
    assert cache.get() not in (None, first)
    with tracing.dispatching("q", "t", 1):
        pass
    assert [span.name for span in other.spans()] == ["send q"]
    assert found.spans() == []


def run_python(script: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_import_guard_without_opentelemetry_installed() -> None:
    out = run_python(
        """
        import sys
        sys.modules["opentelemetry"] = None  # what a missing package looks like to import
        from taskrunner import tracing
        with tracing.dispatching("q", "t", 1) as headers:
            pass
        print(tracing.OTEL_AVAILABLE, headers, tracing.tracing_observer("q"))
        """
    )
    assert out.split() == ["False", "{}", "None"]


def test_a_global_provider_set_after_import_is_followed() -> None:
    out = run_python(
        """
        import asyncio
        from taskrunner import App, Producer, Runner
        from taskrunner_backends.memory import InMemoryQueue
        from opentelemetry import baggage, context as otel_context, trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)

        app = App("jobs")

        @app.task
        async def work() -> None:
            pass

        async def main() -> None:
            queue = InMemoryQueue()
            await Producer(queue, app).dispatch(work)
            await Runner(queue, app).run(burst=True)

        asyncio.run(main())
        spans = {span.name: span for span in exporter.get_finished_spans()}
        send, process = spans["send jobs"], spans["process jobs"]
        print(process.parent.span_id == send.context.span_id, sorted(spans))
        """
    )
    assert out.strip() == "True ['process jobs', 'send jobs']"
