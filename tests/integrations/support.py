"""What the framework examples' tests share: running a real worker until the queue is idle."""

from __future__ import annotations

import asyncio

import taskrunner
from taskrunner import App, Runner, RunnerConfig


def work_until_idle(url: str, app: App) -> None:
    """Run a real `Runner` on `url` in burst mode: every queued task runs, then it returns."""

    async def run() -> None:
        async with taskrunner.open_queue(url, app.queue) as queue:
            config = RunnerConfig(block_seconds=0.2, drain_timeout_seconds=5.0)
            await asyncio.wait_for(Runner(queue, app, config).run(burst=True), 60)

    asyncio.run(run())
