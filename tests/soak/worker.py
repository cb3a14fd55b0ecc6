"""One soak worker process: ``python -m tests.soak.worker --url URL --dir DIR --worker N``.

Runs `tests.soak.app` with a real `taskrunner.Runner` on the Redis queue under test
until SIGTERM (graceful stop) or SIGKILL. Besides the task attempts (written by the
tasks), it writes to ``DIR/worker-N.jsonl``:

* a `Grant` for every delivery a receive or reclaim returned, a `GrantError` for
  every receive or reclaim that raised, and a `Beat` for every heartbeat call:
  `RecordingQueue` is the Redis queue with those calls observed, nothing else
  changed;
* a `LeaseLost` for every lease loss the runner logs, which is exactly when it counts
  one in ``stats().lease_lost`` (`LeaseLossRecorder` is a logging handler), so the
  counts of SIGKILLed workers are not lost with them;
* a `Stall` whenever its event loop did not run for `STALL_SECONDS`;
* `Stats` (the runner's final counters) at a graceful exit.

Prints ``ready`` on stdout once every loop of the runner runs. Logs (warnings and
above) go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
import signal
import sys
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import redis.asyncio as aioredis

import taskrunner
from taskrunner.errors import BackendUnavailableError
from taskrunner.queue import Delivery
from taskrunner_backends.redis.queue import (
    DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS,
    DEFAULT_SOCKET_TIMEOUT_SECONDS,
    RedisStreamsQueue,
)

from . import app as soak_app
from .records import Beat, Grant, GrantError, LeaseLost, LogWriter, Stall, Stats

__all__ = ["NAMESPACE", "LeaseLossRecorder", "RecordingQueue", "main"]

NAMESPACE = "soak"

# An event-loop pause at least this long is recorded as a Stall.
STALL_SECONDS = 0.5
_STALL_TICK_SECONDS = 0.05

# How long a starting worker keeps trying to reach a server that is down.
OPEN_TIMEOUT_SECONDS = 60.0

# The runner's messages when it counts a loss: "lease lost: ..." (lease keeper) and
# "ack reported the lease lost; ..." (executor). The Stats cross-check in the checker
# catches a rewording that this pattern would miss.
_LEASE_LOST = re.compile(r"\blease lost\b", re.IGNORECASE)


class RecordingQueue(RedisStreamsQueue):
    """The Redis queue under test, recording what `receive` and `reclaim` granted."""

    def __init__(
        self, client: aioredis.Redis, *, writer: LogWriter, worker: int, **kwargs: Any
    ) -> None:
        super().__init__(client, **kwargs)
        self._writer = writer
        self._worker = worker

    async def receive(self, consumer: str, **kwargs: Any) -> list[Delivery]:
        """`RedisStreamsQueue.receive`, recorded."""
        return await self._recorded("receive", consumer, super().receive(consumer, **kwargs))

    async def reclaim(self, consumer: str, **kwargs: Any) -> list[Delivery]:
        """`RedisStreamsQueue.reclaim`, recorded."""
        return await self._recorded("reclaim", consumer, super().reclaim(consumer, **kwargs))

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """`RedisStreamsQueue.heartbeat`, recorded (one record per call)."""
        t0 = time.monotonic()
        try:
            lost = await super().heartbeat(deliveries)
        except BaseException as exc:
            self._writer.write(
                Beat(self._worker, t0, time.monotonic(), len(deliveries), 0, repr(exc))
            )
            raise
        self._writer.write(Beat(self._worker, t0, time.monotonic(), len(deliveries), len(lost)))
        return lost

    async def _recorded(
        self, via: str, consumer: str, call: Awaitable[list[Delivery]]
    ) -> list[Delivery]:
        t0 = time.monotonic()
        try:
            got = await call
        except BaseException as exc:
            # Raised or cancelled: the server may still have leased messages to us.
            self._writer.write(
                GrantError(self._worker, consumer, via, t0, time.monotonic(), repr(exc))
            )
            raise
        t1 = time.monotonic()
        for d in got:
            self._writer.write(
                Grant(self._worker, d.message_id, d.delivery_count, d.receipt.consumer, via, t0, t1)
            )
        return got


class LeaseLossRecorder(logging.Handler):
    """Writes a `LeaseLost` for every record in which the runner reports a lease lost."""

    def __init__(self, writer: LogWriter, worker: int) -> None:
        super().__init__(logging.WARNING)
        self._writer = writer
        self._worker = worker

    def emit(self, record: logging.LogRecord) -> None:
        """Record it when it is a lease loss about one delivery."""
        message_id = getattr(record, "message_id", None)
        if not record.name.startswith("taskrunner") or message_id is None:
            return
        text = record.getMessage()
        if not _LEASE_LOST.search(text):
            return
        self._writer.write(
            LeaseLost(
                self._worker,
                str(message_id),
                int(getattr(record, "delivery_count", 0)),
                str(getattr(record, "consumer", "")),
                time.monotonic(),
                record.name,
                text,
            )
        )


async def _watch_stalls(writer: LogWriter, worker: int) -> None:
    last = time.monotonic()
    while True:
        await asyncio.sleep(_STALL_TICK_SECONDS)
        now = time.monotonic()
        if now - last >= STALL_SECONDS:
            writer.write(Stall(worker, last, now))
        last = now


async def _open(args: argparse.Namespace, writer: LogWriter) -> RecordingQueue:
    deadline = time.monotonic() + OPEN_TIMEOUT_SECONDS
    while True:
        client = aioredis.Redis.from_url(
            args.url,
            socket_timeout=DEFAULT_SOCKET_TIMEOUT_SECONDS,
            socket_connect_timeout=DEFAULT_SOCKET_CONNECT_TIMEOUT_SECONDS,
        )
        queue = RecordingQueue(
            client,
            writer=writer,
            worker=args.worker,
            queue_name=soak_app.app.queue,
            namespace=NAMESPACE,
            owns_client=True,
        )
        try:
            await queue.initialize()
        except BackendUnavailableError:
            # The driver may have started us while the server is down.
            await queue.aclose()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
            continue
        return queue


async def main(args: argparse.Namespace) -> None:
    """Run one worker until SIGTERM."""
    writer = LogWriter(args.dir / f"worker-{args.worker:05d}.jsonl")
    soak_app.configure(writer, args.worker)
    logging.getLogger().addHandler(LeaseLossRecorder(writer, args.worker))
    stalls = asyncio.create_task(_watch_stalls(writer, args.worker))
    queue = await _open(args, writer)
    config = taskrunner.RunnerConfig(
        num_fetchers=1,
        num_workers=args.workers,
        batch_size=min(args.workers, 10),
        block_seconds=1.0,
        lease_seconds=args.lease,
        heartbeat_interval_seconds=args.heartbeat,
        retry_base_seconds=0.2,
        retry_max_seconds=2.0,
        drain_timeout_seconds=args.drain,
        monitor_interval_seconds=1.0,
    )
    runner = taskrunner.Runner(queue, soak_app.app, config)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, runner.stop)
    try:
        run = asyncio.create_task(runner.run())
        await runner.wait_ready()
        _tell_parent(b"ready")
        await run
        stats = msgspec.to_builtins(runner.stats())
        writer.write(Stats(args.worker, time.monotonic(), stats))
        _tell_parent(msgspec.json.encode(stats))
    finally:
        stalls.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stalls
        await queue.aclose()
        writer.close()


def _tell_parent(line: bytes) -> None:
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.buffer.flush()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.worker")
    parser.add_argument("--url", required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--worker", type=int, required=True, help="incarnation number")
    parser.add_argument("--workers", type=int, default=32, help="worker slots")
    parser.add_argument("--lease", type=float, default=4.0)
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--drain", type=float, default=3.0)
    return parser


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(main(_parser().parse_args()))
