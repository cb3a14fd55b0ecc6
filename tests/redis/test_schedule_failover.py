"""Integration: a per-second schedule survives its leader being SIGKILLed every 10 s.

Three worker processes (tests/redis/schedule_app.py) run the same app on one Redis
queue. For 60 s the test finds the leader (`Leadership.current_leader`), SIGKILLs it
every 10 s and starts a replacement. Every second of the window must have been fired
exactly once: one message per instant (a task run twice after a kill reports the same
message id, which is not a double firing), no instant missing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from taskrunner.queue import leadership_of
from taskrunner.scheduler import ELECTION

from .helpers import eventually, open_queue
from .schedule_app import ticks_key

pytestmark = [pytest.mark.redis, pytest.mark.timeout(150)]

REPO = Path(__file__).resolve().parents[2]
WINDOW_SECONDS = 60.0
KILL_EVERY_SECONDS = 10.0
TTL_SECONDS = 2.0
START_SECONDS = 30.0


class Proc:
    def __init__(self, process: asyncio.subprocess.Process, holder: str, log: Path) -> None:
        self.process = process
        self.holder = holder
        self.log = log


async def start_worker(url: str, namespace: str, log: Path) -> Proc:
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.redis.schedule_app",
            "--url",
            url,
            "--namespace",
            namespace,
            "--ttl",
            str(TTL_SECONDS),
            cwd=REPO,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    assert process.stdout is not None
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), START_SECONDS)).decode()
    except TimeoutError:
        line = ""
    assert line.startswith("ready "), f"worker did not start; see {log}"
    return Proc(process, line.split()[1], log)


async def test_each_second_fires_exactly_once_while_leaders_are_killed(
    redis_url: str, redis_namespace: str, tmp_path: Path
) -> None:
    ns = redis_namespace
    client = aioredis.Redis.from_url(redis_url)
    queue = open_queue(redis_url, ns)
    leadership = leadership_of(queue)
    assert leadership is not None
    procs: list[Proc] = []
    killed: list[str] = []

    async def spawn() -> None:
        procs.append(await start_worker(redis_url, ns, tmp_path / f"w{len(procs)}.log"))

    try:
        await asyncio.gather(spawn(), spawn(), spawn())
        await eventually(
            lambda: leadership.current_leader(ELECTION),
            lambda lease: lease is not None,
            what="a leader is elected",
        )
        began = time.time()
        refills: list[asyncio.Task[None]] = []
        for round_ in range(1, int(WINDOW_SECONDS / KILL_EVERY_SECONDS)):
            await asyncio.sleep(max(0.0, began + round_ * KILL_EVERY_SECONDS - time.time()))
            # A replacement may win the election before its start returned: wait for
            # the starts so every holder is known.
            await asyncio.gather(*refills)
            lease = await leadership.current_leader(ELECTION)
            assert lease is not None, "no leader at a kill time"
            (victim,) = [p for p in procs if p.holder == lease.holder]
            os.kill(victim.process.pid, signal.SIGKILL)
            await victim.process.wait()
            killed.append(victim.holder)
            refills.append(asyncio.create_task(spawn()))
        await asyncio.sleep(max(0.0, began + WINDOW_SECONDS - time.time()))
        ended = time.time()
        await asyncio.gather(*refills)
        # Let the last instants run (their messages may still be queued).
        await eventually(
            lambda: client.lrange(ticks_key(ns), 0, -1),
            lambda entries: any(float(e.split()[0]) >= int(ended) for e in entries),
            what="the instants up to the end of the window ran",
        )
        raw = await client.lrange(ticks_key(ns), 0, -1)
        entries = [(e.decode() if isinstance(e, bytes) else e).split() for e in raw]
    finally:
        for proc in procs:
            if proc.process.returncode is None:
                proc.process.send_signal(signal.SIGKILL)
                await proc.process.wait()
        await queue.aclose()
        await client.aclose()

    assert len(killed) == 5
    assert len(set(killed)) == 5  # a different leader each time
    messages: dict[float, set[str]] = {}
    late: dict[float, float] = {}
    for instant, message_id, ran in entries:
        messages.setdefault(float(instant), set()).add(message_id)
        late[float(instant)] = min(late.get(float(instant), 1e9), float(ran) - float(instant))
    doubles = {i: ids for i, ids in messages.items() if len(ids) > 1}
    assert doubles == {}, f"instants fired more than once: {doubles}"
    first = min(messages)
    window = [first + k for k in range(int(int(ended) - first) + 1)]
    missing = [i for i in window if i not in messages]
    assert missing == [], f"instants never fired: {missing}"
    assert first <= began + 2  # the window really starts before the first kill
    assert len(window) >= WINDOW_SECONDS - 2
    logging.getLogger("tests.failover").info(
        "failover: %d instants, %d leaders killed, each instant one message; latest "
        "first run %.2fs after its instant, median %.3fs",
        len(window),
        len(killed),
        max(late.values()),
        sorted(late.values())[len(late) // 2],
    )
