"""A worker process for the integration tests: ``python -m tests.redis.proc_worker ...``.

Runs `tests.redis.proc_app.app` on a Redis queue until SIGTERM (graceful stop) or
SIGKILL. Prints ``ready`` on stdout once every loop runs, and at a graceful exit one
line of JSON with the runner's stats. Logs go to stderr. Deliberately independent of
the CLI, which is tested on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

import msgspec

import taskrunner
from taskrunner_backends.redis import open_from_url

from . import proc_app


async def main(args: argparse.Namespace) -> None:
    proc_app.configure(args.url, args.namespace)
    queue = await open_from_url(f"{args.url}?namespace={args.namespace}", queue_name="q")
    config = taskrunner.RunnerConfig(
        num_workers=args.workers,
        batch_size=args.workers,
        lease_seconds=args.lease,
        block_seconds=0.5,
        monitor_interval_seconds=0.5,
        retry_base_seconds=0.1,
        drain_timeout_seconds=5.0,
    )
    runner = taskrunner.Runner(queue, proc_app.app, config)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, runner.stop)
    try:
        run = asyncio.create_task(runner.run())
        await runner.wait_ready()
        _tell_parent(b"ready")
        await run
        _tell_parent(msgspec.json.encode(runner.stats()))
    finally:
        await queue.aclose()


def _tell_parent(line: bytes) -> None:
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--lease", type=float, default=1.5)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    asyncio.run(main(parser.parse_args()))
