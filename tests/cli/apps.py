"""Apps the CLI tests load by import string (``tests.cli.apps:app``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec

from taskrunner import App, current_task

QUEUE = "cli-tests"

app = App(QUEUE)

not_an_app = 42


class Greeting(msgspec.Struct):
    name: str


class Slow(msgspec.Struct):
    """Writes ``started`` in `directory`, sleeps, then writes ``finished``."""

    directory: str
    seconds: float


@app.task(name="cli.greet")
async def greet(greeting: Greeting) -> None:
    del greeting


@app.task(name="cli.noop")
def noop() -> None:
    pass


@app.task(name="cli.fail", max_retries=0)
async def fail(greeting: Greeting) -> None:
    raise RuntimeError(f"cannot greet {greeting.name}")


@app.task(name="cli.slow", max_retries=0)
async def slow(job: Slow) -> None:
    directory = Path(job.directory)
    (directory / "started").write_text(str(current_task().delivery_count))
    await asyncio.sleep(job.seconds)
    (directory / "finished").write_text("ok")


class Block(msgspec.Struct):
    """Writes ``started`` in `directory`, then returns once a ``release`` file appears."""

    directory: str


# A plain def task cannot be interrupted; this one gives up after this long anyway, so
# a test that fails never leaves a thread spinning for ever.
BLOCK_LIMIT_SECONDS = 120.0


@app.task(name="cli.block", max_retries=0)
def block(job: Block) -> None:
    directory = Path(job.directory)
    (directory / "started").write_text(str(current_task().delivery_count))
    deadline = time.monotonic() + BLOCK_LIMIT_SECONDS
    while not (directory / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # the simulated work: a thread that cannot be cancelled
    (directory / "finished").write_text("ok")


def make_app() -> App:
    """A factory: `load_app` calls it."""
    return App("factory-queue")
