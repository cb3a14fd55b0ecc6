"""The tasks run by worker subprocesses in the integration tests (tests/redis/test_processes.py).

Tasks report what they do to the test through Redis keys in the test's namespace,
since they run in other processes:

* ``{ns}:test:runs`` (hash): ``quick`` task number -> how many times it ran;
* ``{ns}:test:started`` / ``{ns}:test:finished`` (lists): ``hold`` task events as
  ``name pid delivery_count message_id``;
* ``{ns}:test:go:{name}``: set by the test to let a ``hold`` task that waits for it
  finish.

`configure` must be called (by the worker script) before the tasks run.
"""

from __future__ import annotations

import asyncio
import os
import time

import msgspec
import redis.asyncio as aioredis

import taskrunner

app = taskrunner.App("q")

# A hold task waiting for its go key gives up after this long (seconds), so a broken
# test cannot leave a worker hanging forever.
GO_TIMEOUT_SECONDS = 60.0


class Hold(msgspec.Struct, frozen=True):
    """What a `hold` task does.

    Attributes:
        name: Its name in the started/finished lists and its go key.
        seconds: How long it runs; None means until the test sets its go key.
        hang_first: On its first delivery, never finish (the test kills the worker).
    """

    name: str
    seconds: float | None = None
    hang_first: bool = False


class _State:
    client: aioredis.Redis | None = None
    namespace = ""


def configure(url: str, namespace: str) -> None:
    """Point the tasks at the test's server and namespace."""
    _State.client = aioredis.Redis.from_url(url)
    _State.namespace = namespace


def key(namespace: str, name: str) -> str:
    """A test key inside `namespace` (so the namespace cleanup removes it)."""
    return f"{namespace}:test:{name}"


def _client() -> aioredis.Redis:
    assert _State.client is not None, "proc_app.configure() was not called"
    return _State.client


@app.task(name="quick")
async def quick(n: int) -> None:
    """Count one run of task number `n`."""
    await _client().hincrby(key(_State.namespace, "runs"), str(n), 1)


@app.task(name="hold", max_retries=5)
async def hold(spec: Hold) -> None:
    """Record the start, run as `spec` says, record the end."""
    ctx = taskrunner.current_task()
    event = f"{spec.name} {os.getpid()} {ctx.delivery_count} {ctx.message_id}"
    client = _client()
    await client.rpush(key(_State.namespace, "started"), event)
    if spec.hang_first and ctx.delivery_count == 1:
        await asyncio.Event().wait()  # until the worker is killed
    if spec.seconds is not None:
        await asyncio.sleep(spec.seconds)  # the task's own work
    else:
        deadline = time.monotonic() + GO_TIMEOUT_SECONDS
        while not await client.exists(key(_State.namespace, f"go:{spec.name}")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"hold {spec.name!r}: the test never said go")
            await asyncio.sleep(0.02)
    await client.rpush(key(_State.namespace, "finished"), event)
