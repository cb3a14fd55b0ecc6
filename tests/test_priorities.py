"""Priorities: declaring and dispatching them, refusals, and a worker running higher first."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from taskrunner import (
    App,
    Capabilities,
    ConfigurationError,
    Producer,
    Runner,
    UnsupportedFeatureError,
)
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import config, run_burst


def _priorities(queue: InMemoryQueue) -> list[int]:
    return [m.priority for m in queue._store.messages.values()]


async def test_a_dispatch_takes_its_task_s_priority_unless_it_gives_its_own() -> None:
    app = App("prio")

    @app.task(name="reset", priority=7)
    async def reset(user: str) -> None: ...

    @app.task(name="news")
    async def news(user: str) -> None: ...

    queue = InMemoryQueue()
    producer = Producer(queue, app)
    await producer.dispatch(reset, "a")
    await producer.dispatch(reset, "a", priority=9)
    await producer.dispatch(reset, "a", priority=0)
    await producer.dispatch(news, "a")
    await producer.dispatch_many(news, ["a", "b"], priority=3)
    assert _priorities(queue) == [7, 9, 0, 0, 3, 3]


@pytest.mark.parametrize("priority", [-1, 10, 1.5, True, "5", None])
def test_a_task_priority_out_of_range_is_refused_at_declaration(priority: Any) -> None:
    app = App("prio")
    with pytest.raises(ConfigurationError, match="task 'reset': priority=") as caught:

        @app.task(name="reset", priority=priority)
        async def reset(user: str) -> None: ...

    assert caught.value.setting == "priority"


@pytest.mark.parametrize("priority", [-1, 10, 1.5, True, "5"])
async def test_a_dispatch_priority_out_of_range_dispatches_nothing(priority: Any) -> None:
    app = App("prio")

    @app.task(name="reset")
    async def reset(user: str) -> None: ...

    queue = InMemoryQueue()
    with pytest.raises(ConfigurationError, match="priority="):
        await Producer(queue, app).dispatch_many(reset, ["a", "b"], priority=priority)
    assert await queue.len() == 0


async def test_a_priority_and_flow_limits_do_not_go_together() -> None:
    app = App("prio")
    with pytest.raises(ConfigurationError, match="priority goes without rate_limit"):

        @app.task(name="limited", rate_limit="1/s", priority=3)
        async def limited(user: str) -> None: ...

    @app.task(name="api", rate_limit="1/s")
    async def api(user: str) -> None: ...

    queue = InMemoryQueue()
    with pytest.raises(ValueError, match="a priority does not apply to it"):
        await Producer(queue, app).dispatch(api, "a", priority=3)
    assert await queue.len() == 0


class _StrictFifo(InMemoryQueue):
    @property
    def capabilities(self) -> Capabilities:
        return msgspec.structs.replace(super().capabilities, priorities=False)


async def test_a_backend_without_priorities_refuses_any_but_zero() -> None:
    app = App("prio")

    @app.task(name="reset", priority=5)
    async def reset(user: str) -> None: ...

    @app.task(name="news")
    async def news(user: str) -> None: ...

    queue = _StrictFifo()
    producer = Producer(queue, app)
    for call in (producer.dispatch(reset, "a"), producer.dispatch(news, "a", priority=1)):
        with pytest.raises(UnsupportedFeatureError, match="'priorities' capability") as caught:
            await call
        assert caught.value.capability == "priorities"
    await producer.dispatch(reset, "a", priority=0)
    await producer.dispatch(news, "a")
    assert await queue.len() == 2


async def test_a_worker_runs_higher_priorities_first() -> None:
    clock = FakeClock()
    app = App("prio")
    ran: list[str] = []

    @app.task(name="job")
    async def job(name: str) -> None:
        ran.append(name)

    queue = InMemoryQueue(clock=clock)
    producer = Producer(queue, app, clock=clock)
    for name, priority in (("news-1", 0), ("bill", 5), ("reset", 9), ("news-2", 0), ("pay", 5)):
        await producer.dispatch(job, name, priority=priority)
    runner = Runner(queue, app, config(num_workers=1, batch_size=1), clock=clock)
    await run_burst(runner, clock)
    assert ran == ["reset", "bill", "pay", "news-1", "news-2"]
