"""The shop's tests, written with taskrunner.testing: the pattern to copy."""

from __future__ import annotations

import pytest

from taskrunner.attempts import Outcome
from taskrunner.queue import Queue
from taskrunner.testing import Dispatches, FakeClock, run_until_idle

from . import shop

ORDER = shop.Order(order_id="A-1", email="ada@example.com", cents=1250)


async def test_placing_an_order_dispatches_a_charge_and_a_follow_up_in_three_days(
    taskrunner_queue: Queue, dispatched: Dispatches, gateway: shop.Gateway
) -> None:
    await shop.place_order(ORDER)

    charge = dispatched.assert_dispatched(
        shop.charge, {"order_id": "A-1", "email": "ada@example.com", "cents": 1250}
    )
    assert charge.unique_key == "charge:A-1"
    dispatched.assert_dispatched(shop.follow_up, delay_seconds=3 * 24 * 3600)
    # Dispatching ran nothing.
    assert gateway.charged == []


async def test_an_order_is_charged_then_mailed_a_receipt_and_the_follow_up(
    taskrunner_queue: Queue, taskrunner_clock: FakeClock, gateway: shop.Gateway
) -> None:
    message_id = await shop.place_order(ORDER)

    record = await run_until_idle(shop.app, taskrunner_queue, clock=taskrunner_clock)

    assert gateway.charged == ["A-1"]
    assert gateway.mailed == [
        "ada@example.com: receipt for A-1: 12.50",
        "ada@example.com: how was order A-1?",
    ]
    assert record.results[message_id] == "ch_A-1"
    # Three fake days passed; the test took milliseconds.
    assert record.fake_seconds >= 3 * 24 * 3600


async def test_a_flaky_provider_is_retried_with_backoff(
    taskrunner_queue: Queue, taskrunner_clock: FakeClock, gateway: shop.Gateway
) -> None:
    gateway.hiccups = 2
    await shop.place_order(ORDER)

    record = await run_until_idle(shop.app, taskrunner_queue, clock=taskrunner_clock)

    assert [run.outcome for run in record.of(shop.charge)] == [
        Outcome.RETRIED,
        Outcome.RETRIED,
        Outcome.SUCCEEDED,
    ]
    assert gateway.charged == ["A-1"]


async def test_a_declined_card_fails_the_test_with_the_tasks_own_error(
    taskrunner_queue: Queue, taskrunner_clock: FakeClock, gateway: shop.Gateway
) -> None:
    gateway.declined.add("A-1")
    await shop.place_order(ORDER)

    with pytest.raises(shop.PaymentDeclinedError, match="card declined for order A-1"):
        await run_until_idle(shop.app, taskrunner_queue, clock=taskrunner_clock)
    assert gateway.mailed == []
