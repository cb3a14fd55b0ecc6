"""A worker process with a per-second schedule, for tests/redis/test_schedule_failover.py.

``python -m tests.redis.schedule_app --url URL --namespace NS [--ttl SECONDS]`` runs a
`taskrunner.Runner` of `app` on the Redis queue ``q`` of namespace NS until SIGTERM or
SIGKILL. The app fires ``tick`` every second (catch_up="all"); each run appends
``"<scheduled_for> <message id> <time it ran>"`` to the list ``{ns}:test:ticks``, so the test can
tell an instant fired twice (two message ids) from a message run twice (one id).
It prints ``ready <holder>`` once every loop runs; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time

import redis.asyncio as aioredis

import taskrunner
from taskrunner_backends.redis import open_from_url

app = taskrunner.App("q")


class _State:
    client: aioredis.Redis | None = None
    namespace = ""


def ticks_key(namespace: str) -> str:
    """The list of ticks, inside the test's namespace (its cleanup removes it)."""
    return f"{namespace}:test:ticks"


@app.task(name="tick")
async def tick() -> None:
    """Report the instant this run was fired for and its message id."""
    context = taskrunner.current_task()
    assert context.scheduled_for is not None
    assert _State.client is not None
    entry = f"{context.scheduled_for.timestamp():.3f} {context.message_id} {time.time():.3f}"
    await _State.client.rpush(ticks_key(_State.namespace), entry)


app.schedule("every-second", tick, every=1, catch_up="all")


async def main(args: argparse.Namespace) -> None:
    _State.client = aioredis.Redis.from_url(args.url)
    _State.namespace = args.namespace
    queue = await open_from_url(f"{args.url}?namespace={args.namespace}", queue_name="q")
    config = taskrunner.RunnerConfig(
        num_workers=4,
        lease_seconds=2.0,
        block_seconds=0.5,
        monitor_interval_seconds=0.5,
        drain_timeout_seconds=2.0,
        leader_ttl_seconds=args.ttl,
        consumer_prefix="sched",
    )
    runner = taskrunner.Runner(queue, app, config)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, runner.stop)
    try:
        run = asyncio.create_task(runner.run())
        await runner.wait_ready()
        assert runner.scheduler is not None
        sys.stdout.write(f"ready {runner.scheduler.elector.holder}\n")
        sys.stdout.flush()
        await run
    finally:
        await queue.aclose()
        await _State.client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--ttl", type=float, default=2.0)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    asyncio.run(main(parser.parse_args()))
