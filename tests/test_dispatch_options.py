"""Producer.dispatch with delay=/at=/unique_key=, task unique defaults, cancel; the
envelope's scheduled_for field.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest

from taskrunner import (
    App,
    ConfigurationError,
    Dispatched,
    Envelope,
    Producer,
    UnsupportedFeatureError,
)
from taskrunner.codec import decode_envelope
from taskrunner.queue import AddRequest, Capabilities
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .scheduling_fakes import ScheduledQueue


class Invoice(msgspec.Struct):
    number: int
    customer: str = "ada"


def setup(**claims: bool) -> tuple[App, ScheduledQueue, Producer]:
    clock = FakeClock()
    app = App("invoices")
    queue = ScheduledQueue(clock=clock)
    if claims:
        queue.claims = msgspec.structs.replace(queue.claims, **claims)
    return app, queue, Producer(queue, app, clock=clock)


def requests(queue: ScheduledQueue) -> list[AddRequest]:
    return queue.fake_scheduling.requests


# --- delay and at -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("delay", "seconds"), [(2.5, 2.5), (30, 30.0), (timedelta(minutes=2), 120.0), (1e-6, 1e-6)]
)
async def test_delay_maps_to_delay_seconds(delay: float | timedelta, seconds: float) -> None:
    app, queue, producer = setup()

    @app.task(name="send")
    async def send(invoice: Invoice) -> None: ...

    result = await producer.dispatch(send, Invoice(number=1), delay=delay)

    (request,) = requests(queue)
    assert request.delay_seconds == seconds
    assert request.due_at is None
    assert request.unique_key is None
    assert result.added
    assert decode_envelope(request.body).task == "send"


async def test_at_maps_to_due_at_in_unix_seconds_whatever_the_offset() -> None:
    app, queue, producer = setup()

    @app.task(name="send")
    async def send() -> None: ...

    at = datetime(2026, 12, 1, 11, 0, tzinfo=timezone(timedelta(hours=1)))
    await producer.dispatch(send, at=at)

    (request,) = requests(queue)
    assert request.due_at == datetime(2026, 12, 1, 10, 0, tzinfo=UTC).timestamp()
    assert request.delay_seconds == 0.0


async def test_zero_delay_keeps_the_plain_add_path() -> None:
    app, queue, producer = setup(delayed_add=False, unique_add=False, cancel=False)

    @app.task(name="send")
    async def send() -> None: ...

    result = await producer.dispatch(send, delay=0)

    assert requests(queue) == []
    assert await queue.len() == 1
    assert isinstance(result, Dispatched)
    assert result.added


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"delay": -0.001}, ValueError),
        ({"delay": float("inf")}, ValueError),
        ({"delay": float("nan")}, ValueError),
        ({"delay": timedelta(seconds=-1)}, ValueError),
        ({"delay": True}, TypeError),
        ({"delay": "30s"}, TypeError),
        ({"at": datetime(2026, 12, 1, 10, 0)}, ValueError),  # naive
        ({"at": "2026-12-01T10:00:00Z"}, TypeError),
        ({"delay": 1, "at": datetime(2026, 12, 1, tzinfo=UTC)}, ValueError),
        ({"unique_key": ""}, ValueError),
    ],
)
async def test_bad_options_are_refused_before_anything_is_sent(
    kwargs: dict[str, object], error: type[Exception]
) -> None:
    app, queue, producer = setup()

    @app.task(name="send")
    async def send() -> None: ...

    with pytest.raises(error):
        await producer.dispatch(send, **kwargs)  # type: ignore[call-overload]
    assert requests(queue) == []
    assert await queue.len() == 0


async def test_naive_at_error_says_what_to_do() -> None:
    app, _, producer = setup()

    @app.task(name="send")
    async def send() -> None: ...

    with pytest.raises(ValueError, match="timezone-aware"):
        await producer.dispatch(send, at=datetime(2026, 12, 1, 10, 0))


@pytest.mark.parametrize(
    ("kwargs", "capability"),
    [
        ({"delay": 1.0}, "delayed_add"),
        ({"at": datetime(2026, 12, 1, tzinfo=UTC)}, "delayed_add"),
        ({"unique_key": "k"}, "unique_add"),
    ],
)
async def test_a_backend_without_the_capability_gets_a_clear_error_and_nothing(
    kwargs: dict[str, object], capability: str
) -> None:
    app, queue, producer = setup(**{capability: False})

    @app.task(name="send")
    async def send() -> None: ...

    with pytest.raises(UnsupportedFeatureError) as caught:
        await producer.dispatch(send, **kwargs)  # type: ignore[call-overload]
    assert caught.value.capability == capability
    assert caught.value.backend == "ScheduledQueue"
    assert capability in str(caught.value)
    assert isinstance(caught.value, ConfigurationError)
    assert await queue.len() == 0


class OldBackend(InMemoryQueue):
    """A backend written before the Scheduling part: no property, no claims."""

    @property
    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(
            super().capabilities, delayed_add=False, unique_add=False, cancel=False
        )

    @property
    def scheduling(self) -> None:  # type: ignore[override,unused-ignore]
        return None


async def test_a_backend_without_the_part_at_all_is_refused() -> None:
    app = App("invoices")
    queue = OldBackend(clock=FakeClock())

    @app.task(name="send")
    async def send() -> None: ...

    with pytest.raises(UnsupportedFeatureError, match="OldBackend does not offer it"):
        await Producer(queue, app).dispatch(send, delay=5)
    with pytest.raises(UnsupportedFeatureError):
        await Producer(queue, app).cancel("1-0")
    assert await queue.len() == 0
    # The hot path still works on it.
    assert (await Producer(queue, app).dispatch(send)).added


async def test_dispatch_many_applies_the_options_to_every_message_in_chunks() -> None:
    app, queue, producer = setup()

    @app.task(name="send")
    async def send(invoice: Invoice) -> None: ...

    results = await producer.dispatch_many(
        send, [Invoice(number=i) for i in range(1500)], delay=timedelta(seconds=5)
    )

    assert len(results) == 1500
    assert len(set(results)) == 1500
    assert isinstance(results, list)
    assert results.added == [True] * 1500
    assert all(isinstance(r, Dispatched) for r in results.dispatched())
    assert {r.delay_seconds for r in requests(queue)} == {5.0}
    numbers = [
        msgspec.json.decode(decode_envelope(r.body).payload)["number"] for r in requests(queue)
    ]
    assert numbers == list(range(1500))


# --- unique -----------------------------------------------------------------------


async def test_a_held_unique_key_adds_nothing_and_returns_the_holder_id() -> None:
    app, queue, producer = setup()

    @app.task(name="bill")
    async def bill(invoice: Invoice) -> None: ...

    first = await producer.dispatch(bill, Invoice(number=42), unique_key="invoice-42")
    second = await producer.dispatch(bill, Invoice(number=43), unique_key="invoice-42")

    assert first.added
    assert not second.added
    assert second == first
    assert isinstance(second, str)
    assert str(second) == str(first)
    assert repr(second) == f"Dispatched({str(first)!r}, added=False)"
    assert [r.unique_key for r in requests(queue)] == ["invoice-42", "invoice-42"]
    # The explicit key is used as given; the task sets no time limit.
    assert [r.unique_seconds for r in requests(queue)] == [None, None]
    assert await queue.len() == 1


async def test_dispatch_many_reports_which_unique_payloads_were_added() -> None:
    app, _, producer = setup()

    @app.task(name="bill", unique_for=60)
    async def bill(invoice: Invoice) -> None: ...

    results = await producer.dispatch_many(bill, [Invoice(number=n) for n in (1, 2, 1)])

    assert results.added == [True, True, False]
    assert results[2] == results[0]


async def test_task_default_key_is_name_and_payload_digest_with_unique_for() -> None:
    app, queue, producer = setup()

    @app.task(name="bill", unique_for=3600)
    async def bill(invoice: Invoice) -> None: ...

    a = await producer.dispatch(bill, Invoice(number=1))
    again = await producer.dispatch(bill, Invoice(number=1))
    other = await producer.dispatch(bill, Invoice(number=2))

    digest = hashlib.sha256(b'{"number":1,"customer":"ada"}').hexdigest()
    assert requests(queue)[0].unique_key == f"bill:{digest}"
    assert requests(queue)[0].unique_seconds == 3600.0
    assert (a.added, again.added, other.added) == (True, False, True)
    assert again == a


async def test_task_key_function_makes_the_key_and_explicit_key_overrides_it() -> None:
    app, queue, producer = setup()

    @app.task(
        name="bill", unique_key=lambda invoice: str(invoice.number), unique_for=timedelta(minutes=1)
    )
    async def bill(invoice: Invoice) -> None: ...

    await producer.dispatch(bill, Invoice(number=7, customer="x"))
    dup = await producer.dispatch(bill, Invoice(number=7, customer="y"))
    await producer.dispatch(bill, Invoice(number=7), unique_key="manual")

    assert [r.unique_key for r in requests(queue)] == ["bill:7", "bill:7", "manual"]
    assert [r.unique_seconds for r in requests(queue)] == [60.0, 60.0, 60.0]
    assert not dup.added


async def test_a_key_function_returning_nothing_is_an_error() -> None:
    app, queue, producer = setup()

    @app.task(name="bill", unique_key=lambda invoice: "")
    async def bill(invoice: Invoice) -> None: ...

    with pytest.raises(ValueError, match="non-empty"):
        await producer.dispatch(bill, Invoice(number=7))
    assert await queue.len() == 0


@pytest.mark.parametrize("unique_for", [0, -1, float("inf"), timedelta(0), True])
def test_bad_unique_for_is_refused_at_definition(unique_for: object) -> None:
    app = App("invoices")
    with pytest.raises(ConfigurationError):

        @app.task(name="bill", unique_for=unique_for)  # type: ignore[call-overload,untyped-decorator]
        async def bill() -> None: ...


async def test_unique_and_delayed_together_send_both_options() -> None:
    app, queue, producer = setup()

    @app.task(name="bill")
    async def bill() -> None: ...

    await producer.dispatch(bill, delay=10, unique_key="k")

    (request,) = requests(queue)
    assert (request.delay_seconds, request.unique_key) == (10.0, "k")


# --- cancel -----------------------------------------------------------------------


async def test_cancel_returns_whether_it_removed_the_message() -> None:
    app, queue, producer = setup()

    @app.task(name="bill")
    async def bill() -> None: ...

    later = await producer.dispatch(bill, delay=60)

    assert await producer.cancel(later) is True
    assert await producer.cancel(later) is False
    assert await producer.cancel_many([later, "unknown"]) == [False, False]
    assert await producer.cancel_many([]) == []
    assert queue.fake_scheduling.cancelled == [later, later, later, "unknown"]


async def test_cancel_without_the_capability_is_refused() -> None:
    _, queue, producer = setup(cancel=False)

    with pytest.raises(UnsupportedFeatureError) as caught:
        await producer.cancel("1-0")
    assert caught.value.capability == "cancel"
    assert queue.fake_scheduling.cancelled == []


async def test_cancel_many_refuses_a_single_string() -> None:
    _, _, producer = setup()
    with pytest.raises(TypeError):
        await producer.cancel_many("1-0")


# --- envelope ---------------------------------------------------------------------


def test_old_envelopes_decode_with_no_scheduled_for_and_plain_ones_omit_it() -> None:
    old = b'{"v":1,"id":"abc","task":"t","payload":null,"enqueued_at":1.0}'

    assert decode_envelope(old).scheduled_for is None
    plain = msgspec.json.encode(
        Envelope(id="abc", task="t", payload=msgspec.Raw(b"null"), enqueued_at=1.0)
    )
    assert plain == old
    fired = Envelope(
        id="abc", task="t", payload=msgspec.Raw(b"null"), enqueued_at=1.0, scheduled_for=60.0
    )
    assert decode_envelope(msgspec.json.encode(fired)).scheduled_for == 60.0


def test_capabilities_default_to_not_claimed() -> None:
    assert Capabilities().delayed_add is False


# --- on the in-memory backend's own Scheduling --------------------------------------


def memory_or_skip(clock: FakeClock) -> InMemoryQueue:
    queue = InMemoryQueue(clock=clock)
    if getattr(queue, "scheduling", None) is None or not queue.capabilities.delayed_add:
        pytest.skip("the in-memory backend offers no scheduling yet")
    return queue


async def test_memory_backend_holds_a_delayed_dispatch_until_due() -> None:
    clock = FakeClock()
    queue = memory_or_skip(clock)
    app = App("invoices")

    @app.task(name="send")
    async def send() -> None: ...

    await Producer(queue, app, clock=clock).dispatch(send, delay=timedelta(seconds=10))

    assert await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=30) == []
    await clock.advance(9.99)
    assert await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=30) == []
    await clock.advance(0.02)
    (delivery,) = await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=30)
    assert delivery.delivery_count == 1


async def test_memory_backend_unique_key_and_cancel_free_the_key() -> None:
    clock = FakeClock()
    queue = memory_or_skip(clock)
    app = App("invoices")

    @app.task(name="bill")
    async def bill() -> None: ...

    producer = Producer(queue, app, clock=clock)
    first = await producer.dispatch(bill, delay=60, unique_key="k")
    held = await producer.dispatch(bill, unique_key="k")
    assert (first.added, held.added, held == first) == (True, False, True)

    assert await producer.cancel(first) is True
    again = await producer.dispatch(bill, unique_key="k")
    assert again.added
    assert again != first
    assert await queue.len() == 1
