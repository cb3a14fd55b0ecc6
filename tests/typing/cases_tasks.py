"""Typing cases for App.task and Producer.dispatch, checked by mypy (see test_typing.py).

Each ``# type: ignore[code]`` marks an error mypy must report on that line, with that
code. mypy's strict mode reports an ignore that is not needed, so this file passes the
project's own mypy run only while every expected error still appears; test_typing.py
also strips the comments and checks that exactly these (line, code) pairs are reported.
A payload of the wrong type reads "Cannot infer value of type parameter" (code
``misc``): the overloads are generic in the payload. `assert_type` lines fail when an
overload resolves to another type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_type

import msgspec

from taskrunner import App, Producer
from taskrunner.app import Task

app = App("typing")


class Email(msgspec.Struct):
    to: str


@dataclass
class Invoice:
    number: int


@app.task
async def send_email(email: Email) -> None: ...


@app.task(max_retries=2, store_result=True)
async def bill(invoice: Invoice) -> int:
    return invoice.number


@app.task
async def tick() -> None: ...


@app.task(name="sync")
def sync_report(day: str) -> str:
    return day


@app.task
def sync_nothing() -> None: ...


assert_type(send_email, Task[Email])
assert_type(bill, Task[Invoice])
assert_type(tick, Task[None])
assert_type(sync_report, Task[str])
assert_type(sync_nothing, Task[None])


async def dispatches(producer: Producer) -> None:
    await producer.dispatch(send_email, Email(to="a@example.com"))
    await producer.dispatch(bill, Invoice(number=1), delay=5)
    await producer.dispatch(tick)
    await producer.dispatch(sync_report, "2026-01-01")
    # By name: not checked statically (the payload is validated at dispatch).
    await producer.dispatch("anything", {"free": "form"})

    # A payload of the wrong type.
    await producer.dispatch(send_email, Invoice(number=1))  # type: ignore[misc]
    await producer.dispatch(sync_report, 3)  # type: ignore[misc]
    # A task that takes a payload, dispatched without one.
    await producer.dispatch(send_email)  # type: ignore[arg-type]
    # A task without payload takes none.
    await producer.dispatch(tick, Email(to="x"))  # type: ignore[misc]
    # Options are keyword-only and typed.
    await producer.dispatch(tick, None, delay="soon")  # type: ignore[call-overload]
    await producer.dispatch_many(bill, [Invoice(number=1), Email(to="x")])  # type: ignore[misc]


def direct_calls() -> None:
    send_email(Email(to="a"))
    send_email("a")  # type: ignore[arg-type]


@app.task  # type: ignore[arg-type]
async def two_payloads(a: int, b: int) -> None: ...
