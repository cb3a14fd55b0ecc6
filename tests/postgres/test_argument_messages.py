"""One bad argument reads the same from the memory and the PostgreSQL backend.

Both refuse bad arguments through `taskrunner_backends.checks`; a backend that grows a
check of its own (a different message, or a different exception) fails here. Each
call is made on both backends and the exception's type and text compared.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from taskrunner.queue import Queue
from taskrunner_backends.memory import InMemoryQueue
from taskrunner_backends.postgres import open_from_url
from taskrunner_backends.postgres.testing import with_options

from ..argument_calls import BAD_CALLS, refusal

pytestmark = pytest.mark.postgres


@asynccontextmanager
async def _postgres(url: str) -> AsyncIterator[Queue]:
    queue = await open_from_url(url, queue_name="jobs")
    try:
        yield queue
    finally:
        await queue.aclose()


async def test_every_bad_argument_raises_the_same_error_with_the_same_text(
    postgres_url: str, postgres_schema: str
) -> None:
    memory = InMemoryQueue()
    differ: dict[str, Any] = {}
    async with _postgres(with_options(postgres_url, schema=postgres_schema)) as postgres:
        for label, call in BAD_CALLS.items():
            expected = await refusal(call, memory)
            assert expected[0] != "no error", f"memory accepted {label}"
            got = await refusal(call, postgres)
            if got != expected:
                differ[label] = {"memory": expected, "postgres": got}
        assert await postgres.len() == 0
    assert await memory.len() == 0
    assert differ == {}
