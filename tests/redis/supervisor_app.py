"""The App that ``taskrunner worker --processes`` runs in tests/redis/test_supervisor_processes.py.

Each ``count`` task records its run in the test's namespace before it takes its time:

* ``{ns}:test:runs`` (hash): task number -> how many times it ran;
* ``{ns}:test:pids`` (hash): worker pid -> how many tasks it ran.

The server and the namespace come from the environment (``SUPERVISOR_TEST_REDIS_URL``,
``SUPERVISOR_TEST_NAMESPACE``), which the supervisor's children inherit.
"""

from __future__ import annotations

import asyncio
import os

import redis.asyncio as aioredis

import taskrunner

app = taskrunner.App("sup")

# How long each task takes: long enough that a signal lands while tasks remain.
TASK_SECONDS = 0.1


def key(namespace: str, name: str) -> str:
    """A test key inside `namespace` (so the namespace cleanup removes it)."""
    return f"{namespace}:test:{name}"


class _State:
    client: aioredis.Redis | None = None


def _client() -> aioredis.Redis:
    if _State.client is None:
        _State.client = aioredis.Redis.from_url(os.environ["SUPERVISOR_TEST_REDIS_URL"])
    return _State.client


@app.task(name="count")
async def count(n: int) -> None:
    """Count one run of task number `n` and the pid that ran it, then take a while."""
    namespace = os.environ["SUPERVISOR_TEST_NAMESPACE"]
    pipe = _client().pipeline(transaction=True)
    pipe.hincrby(key(namespace, "runs"), str(n), 1)
    pipe.hincrby(key(namespace, "pids"), str(os.getpid()), 1)
    await pipe.execute()
    await asyncio.sleep(TASK_SECONDS)
