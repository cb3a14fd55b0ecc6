"""Dispatch: payloads validated against the task's type, size limit, envelope format."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TypedDict

import msgspec
import pytest

from taskrunner import (
    App,
    Envelope,
    PayloadTooLargeError,
    PayloadValidationError,
    Producer,
    TaskFailedError,
    UnknownTaskError,
)
from taskrunner.codec import decode_envelope
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue


class Point(msgspec.Struct):
    x: int
    y: int


@dataclasses.dataclass
class Label:
    text: str


class Options(TypedDict):
    colour: str


app = App("producer-tests", max_message_bytes=300)


@app.task
async def draw(point: Point) -> None: ...


@app.task
def write(label: Label) -> None: ...


@app.task
async def configure(options: Options) -> None: ...


@app.task
async def count(numbers: list[int]) -> None: ...


@app.task
async def tick() -> None: ...


@app.task
async def anything(value) -> None:  # type: ignore[no-untyped-def]
    ...


@pytest.fixture
def producer() -> Producer:
    return Producer(InMemoryQueue(), app, clock=FakeClock())


@pytest.mark.parametrize(
    ("task", "payload"),
    [
        (draw, Point(x=1, y=2)),
        (draw, {"x": 1, "y": 2}),
        (write, Label("hi")),
        (configure, {"colour": "red"}),
        (count, [1, 2, 3]),
        (tick, None),
        (anything, {"any": ["json", 1, None]}),
    ],
)
def test_valid_payloads_encode_into_a_versioned_envelope(
    producer: Producer, task: object, payload: object
) -> None:
    body = producer.encode(task, payload)  # type: ignore[arg-type]

    envelope = decode_envelope(body)
    assert isinstance(envelope, Envelope)
    assert body.startswith(b'{"v":1,')
    assert envelope.task == task.name  # type: ignore[attr-defined]
    assert len(envelope.id) == 32
    assert envelope.enqueued_at == FakeClock().time()


@pytest.mark.parametrize(
    ("task", "payload", "message"),
    [
        (draw, {"x": "1", "y": 2}, "payload does not match Point: Expected `int`, got `str`"),
        (draw, Label("x"), "payload does not match Point"),
        (write, {"text": 5}, "payload does not match Label"),
        (configure, {"colour": 1}, "payload does not match Options"),
        (count, ["a"], "payload does not match list[int]"),
        (tick, 5, "payload does not match None"),
        (anything, object(), "payload cannot be encoded as JSON"),
    ],
)
def test_wrongly_typed_payloads_are_refused_at_dispatch(
    producer: Producer, task: object, payload: object, message: str
) -> None:
    with pytest.raises(PayloadValidationError, match=message.replace("[", r"\[")):
        producer.encode(task, payload)  # type: ignore[arg-type]


def test_oversized_message_is_refused(producer: Producer) -> None:
    with pytest.raises(PayloadTooLargeError) as caught:
        producer.encode(count, list(range(200)))

    assert caught.value.limit == 300
    assert "larger than the limit of 300 bytes" in str(caught.value)


async def test_dispatch_by_unknown_name_lists_the_known_tasks(producer: Producer) -> None:
    with pytest.raises(UnknownTaskError, match=r"unknown task 'nope' \(registered: .*draw"):
        await producer.dispatch("nope", None)


async def test_dispatch_many_validates_everything_before_sending_anything() -> None:
    queue = InMemoryQueue()
    producer = Producer(queue, app)

    with pytest.raises(PayloadValidationError):
        await producer.dispatch_many(draw, [Point(x=1, y=1), {"x": "bad", "y": 1}])  # type: ignore[misc]

    assert await queue.len() == 0


async def test_dispatch_many_returns_one_id_per_payload_in_order() -> None:
    queue = InMemoryQueue()
    ids = await Producer(queue, app).dispatch_many(draw, [Point(x=i, y=i) for i in range(2500)])

    assert len(ids) == len(set(ids)) == 2500
    bodies = queue.ready_bodies()
    assert [msgspec.json.decode(b)["payload"]["x"] for b in bodies] == list(range(2500))


def test_envelope_decoding_errors_keep_the_bytes() -> None:
    from taskrunner import DecodeError

    with pytest.raises(DecodeError) as caught:
        decode_envelope(b'{"v":1,"id":1}')

    assert caught.value.body == b'{"v":1,"id":1}'


def test_a_future_envelope_version_is_refused_by_name() -> None:
    from taskrunner import DecodeError

    with pytest.raises(DecodeError, match=r"malformed message: Invalid value 2 - at `\$.v`"):
        decode_envelope(b'{"v":2,"id":"a","task":"t","payload":null,"enqueued_at":0}')


def test_unknown_envelope_fields_are_ignored_for_rolling_upgrades() -> None:
    body = b'{"v":1,"id":"a","task":"t","payload":[1],"enqueued_at":5,"added_later":true}'

    assert decode_envelope(body).task == "t"


def test_tasks_are_callable_directly() -> None:
    assert app.get_task(write.name) is write
    assert write(Label("direct")) is None


async def test_result_of_a_dead_letter_without_a_stored_result_fails_at_once() -> None:
    # The clock never moves by itself: waiting out the timeout would hang, and the
    # real-time bound below would fail the test.
    clock = FakeClock()
    queue = InMemoryQueue(clock=clock)
    app = App("dead-results")

    @app.task(name="dead.job", store_result=False)
    async def job() -> int:
        return 1

    producer = Producer(queue, app, clock=clock)
    message_id = await producer.dispatch(job)
    [delivery] = await queue.receive("c1", max_messages=1, wait_seconds=0, lease_seconds=30)
    await queue.dead_letter([delivery], reason="poison: boom")

    async with asyncio.timeout(5):
        with pytest.raises(TaskFailedError) as caught:
            await producer.result(message_id, timeout=30)

    assert caught.value.error_type == "DeadLettered"
    assert caught.value.error_message == "poison: boom"
    assert caught.value.task == "dead.job"
    assert "dead-lettered without a stored result" in str(caught.value)


async def test_result_still_waits_for_a_message_that_is_only_queued() -> None:
    queue = InMemoryQueue(clock=FakeClock(autojump=True))
    app = App("queued-results")

    @app.task(name="queued.job", store_result=True)
    async def job() -> int:
        return 1

    message_id = await Producer(queue, app).dispatch(job)

    with pytest.raises(TimeoutError, match="not finished yet"):
        await Producer(queue, app).result(message_id, timeout=5)
