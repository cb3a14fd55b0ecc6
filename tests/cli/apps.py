"""Apps the CLI tests load by import string (``tests.cli.apps:app``)."""

from __future__ import annotations

import asyncio
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


def make_app() -> App:
    """A factory: `load_app` calls it."""
    return App("factory-queue")
