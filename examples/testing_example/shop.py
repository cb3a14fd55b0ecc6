"""A small shop: placing an order dispatches a charge; a charge dispatches a receipt.

The example of docs/testing.md. Plain asyncio, the in-memory backend in the tests;
a real deployment opens Redis or PostgreSQL with the same code.

Run: ``python -m examples.testing_example.shop`` places one order on ``memory://`` and
runs a worker, in real time, until the receipt is mailed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import msgspec

import taskrunner

app = taskrunner.App("shop")


class Order(msgspec.Struct, frozen=True):
    order_id: str
    email: str
    cents: int


class PaymentDeclinedError(Exception):
    """The card was refused: retrying will not help."""


@dataclass
class Gateway:
    """The payment provider and the mailer, faked; the tests put a fresh one in `GATEWAY`."""

    charged: list[str] = field(default_factory=list)
    mailed: list[str] = field(default_factory=list)
    declined: set[str] = field(default_factory=set)
    # Transient failures left before a charge goes through (a flaky provider).
    hiccups: int = 0

    async def charge(self, order: Order) -> str:
        if self.hiccups:
            self.hiccups -= 1
            raise ConnectionError("payment provider timed out")
        if order.order_id in self.declined:
            raise PaymentDeclinedError(f"card declined for order {order.order_id}")
        self.charged.append(order.order_id)
        return f"ch_{order.order_id}"

    async def mail(self, to: str, text: str) -> None:
        self.mailed.append(f"{to}: {text}")


GATEWAY = Gateway()
# The producer the tasks dispatch follow-ups with; set by `connect_producer`.
_PRODUCER: taskrunner.Producer | None = None


def connect_producer(producer: taskrunner.Producer) -> None:
    """Give the tasks the producer to dispatch their follow-up tasks with."""
    global _PRODUCER
    _PRODUCER = producer


def producer() -> taskrunner.Producer:
    if _PRODUCER is None:
        raise RuntimeError("call connect_producer() first")
    return _PRODUCER


@app.task(max_retries=3, store_result=True)
async def charge(order: Order) -> str:
    charge_id = await GATEWAY.charge(order)
    await producer().dispatch(send_receipt, order)
    return charge_id


@app.task
async def send_receipt(order: Order) -> None:
    await GATEWAY.mail(order.email, f"receipt for {order.order_id}: {order.cents / 100:.2f}")


@app.task
async def follow_up(order: Order) -> None:
    await GATEWAY.mail(order.email, f"how was order {order.order_id}?")


async def place_order(order: Order) -> str:
    """What a request handler calls: charge now, ask for feedback in three days."""
    message_id = await producer().dispatch(charge, order, unique_key=f"charge:{order.order_id}")
    await producer().dispatch(follow_up, order, delay=3 * 24 * 3600)
    return message_id


async def main() -> None:
    async with taskrunner.open_queue("memory://shop", app.queue) as queue:
        connect_producer(taskrunner.Producer(queue, app))
        await place_order(Order(order_id="A-1", email="ada@example.com", cents=1250))
        runner = taskrunner.Runner(queue, app)
        # Not burst=True (until empty): the follow-up is three days away in real time.
        run = asyncio.create_task(runner.run())
        while not GATEWAY.mailed:  # noqa: ASYNC110 - a demo, not a test
            await asyncio.sleep(0.05)
        runner.stop()
        await run
        print(GATEWAY.mailed)


if __name__ == "__main__":
    asyncio.run(main())
