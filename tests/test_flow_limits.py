"""Task limits: declaring them, the flow a dispatch carries, and a worker honouring them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from typing import Any

import pytest

from taskrunner import (
    App,
    Capabilities,
    ConfigurationError,
    Flow,
    FlowKeyError,
    Producer,
    Runner,
    UnsupportedFeatureError,
)
from taskrunner.limits import parse_rate
from taskrunner.queue_flow import check_flow
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import InMemoryQueue

from .support import config, eventually, run_burst, running


@dataclasses.dataclass
class Job:
    customer: str
    n: int = 0


@pytest.mark.parametrize(
    ("text", "per_second"),
    [
        ("100/s", 100.0),
        ("30/m", 0.5),
        ("36/h", 0.01),
        ("864/d", 0.01),
        ("10/5s", 2.0),
        (" 1.5 / s ", 1.5),
        ("1/2m", 1 / 120),
    ],
)
def test_rates_read_as_admissions_per_second(text: str, per_second: float) -> None:
    assert parse_rate(text, task="t") == pytest.approx(per_second)


@pytest.mark.parametrize(
    "text", ["100/x", "100", "/s", "0/s", "0.0/m", "-1/s", "1/0s", "", "100/ss", "1e3/s", 100]
)
def test_a_malformed_rate_is_refused_naming_the_task(text: Any) -> None:
    app = App("limits")
    with pytest.raises(ConfigurationError, match=r"task 'mail'.*rate_limit") as caught:

        @app.task(name="mail", rate_limit=text)
        async def mail(job: Job) -> None: ...

    assert caught.value.setting == "rate_limit"
    assert "mail" not in app.tasks


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({"concurrency_limit": 0}, "concurrency_limit"),
        ({"concurrency_limit": -2}, "concurrency_limit"),
        ({"concurrency_limit": 1.5}, "concurrency_limit"),
        ({"concurrency_limit": True}, "concurrency_limit"),
        ({"rate_limit": "1/s", "rate_burst": 0}, "rate_burst"),
        ({"rate_burst": 5}, "rate_burst"),
        ({"rate_limit_key": lambda p: p.customer}, "rate_limit_key"),
        ({"concurrency_key": lambda p: p.customer}, "concurrency_key"),
        ({"concurrency_limit": 1, "concurrency_key": "customer"}, "concurrency_key"),
        ({"fairness_key": 3}, "fairness_key"),
        ({"concurrency_limit": 2, "fairness_key": lambda p: p.customer}, "fairness_key"),
    ],
)
def test_bad_limits_are_refused_at_declaration(options: dict[str, Any], setting: str) -> None:
    app = App("limits")
    with pytest.raises(ConfigurationError, match="task 'mail'") as caught:

        @app.task(name="mail", **options)
        async def mail(job: Job) -> None: ...

    assert caught.value.setting == setting


def _flows(queue: InMemoryQueue) -> list[Flow | None]:
    return [m.flow for m in queue._store.messages.values()]


async def test_a_dispatch_carries_its_task_s_flow_with_keys_prefixed_by_the_task() -> None:
    app = App("limits")

    @app.task(
        name="call",
        rate_limit="100/s",
        rate_burst=10,
        concurrency_limit=2,
        concurrency_key=lambda job: job.customer,
    )
    async def call(job: Job) -> None: ...

    @app.task(name="api", rate_limit="30/m", rate_limit_key=lambda job: job.customer)
    async def api(job: Job) -> None: ...

    @app.task(name="fair", fairness_key=lambda job: job.customer)
    async def fair(job: Job) -> None: ...

    @app.task(name="plain")
    async def plain(job: Job) -> None: ...

    queue = InMemoryQueue()
    producer = Producer(queue, app)
    for task in (call, api, fair, plain):
        await producer.dispatch(task, Job("acme"))

    assert _flows(queue) == [
        Flow(key="call:acme", concurrency=2, rate=100.0, burst=10, rate_key="call"),
        Flow(key="api:acme", rate=0.5),
        Flow(key="fair:acme"),
        None,
    ]


@pytest.mark.parametrize(
    ("key", "error"),
    [
        (lambda job: 1 / job.n, "raised ZeroDivisionError"),
        (lambda job: 42, "must return a non-empty str, got int 42"),
        (lambda job: "", "must return a non-empty str"),
        (lambda job: "x" * 600, "returned a key holding NUL or over 512 bytes"),
        (lambda job: "a\x00b", "returned a key holding NUL"),
    ],
)
async def test_a_key_function_that_fails_dispatches_nothing_of_the_batch(
    key: Any, error: str
) -> None:
    app = App("limits")

    @app.task(name="mail", concurrency_limit=1, concurrency_key=key)
    async def mail(job: Job) -> None: ...

    queue = InMemoryQueue()
    producer = Producer(queue, app)
    with pytest.raises(FlowKeyError, match=f"task 'mail': concurrency_key {error}") as caught:
        await producer.dispatch(mail, Job("acme", n=0))
    assert (caught.value.task, caught.value.setting) == ("mail", "concurrency_key")
    assert await queue.len() == 0


async def test_a_failing_key_in_the_middle_of_a_batch_dispatches_none_of_it() -> None:
    app = App("limits")

    @app.task(name="mail", concurrency_limit=1, concurrency_key=lambda job: str(1 // job.n))
    async def mail(job: Job) -> None: ...

    queue = InMemoryQueue()
    with pytest.raises(FlowKeyError):
        await Producer(queue, app).dispatch_many(mail, [Job("a", 1), Job("b", 0), Job("c", 1)])
    assert await queue.len() == 0


class _NoFlowQueue(InMemoryQueue):
    @property
    def capabilities(self) -> Capabilities:
        import msgspec

        return msgspec.structs.replace(super().capabilities, flow_control=False)


async def test_a_backend_without_flow_control_refuses_a_limited_dispatch_and_worker() -> None:
    app = App("limits")

    @app.task(name="mail", rate_limit="1/s")
    async def mail(job: Job) -> None: ...

    @app.task(name="plain")
    async def plain(job: Job) -> None: ...

    queue = _NoFlowQueue()
    producer = Producer(queue, app)
    with pytest.raises(UnsupportedFeatureError, match="flow_control") as caught:
        await producer.dispatch(mail, Job("a"))
    assert caught.value.capability == "flow_control"
    await producer.dispatch(plain, Job("a"))
    assert await queue.len() == 1

    with pytest.raises(UnsupportedFeatureError, match="task\\(s\\) 'mail' declare"):
        await Runner(queue, app, config()).run(burst=True)
    assert await queue.len() == 1, "the refused worker ran something"


async def test_a_worker_runs_at_most_the_concurrency_limit_per_key_and_finishes_all() -> None:
    app = App("limits")
    release = asyncio.Event()
    active: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    done: list[str] = []

    @app.task(name="sync", concurrency_limit=2, concurrency_key=lambda job: job.customer)
    async def sync(job: Job) -> None:
        active[job.customer] += 1
        peak[job.customer] = max(peak[job.customer], active[job.customer])
        await release.wait()
        active[job.customer] -= 1
        done.append(job.customer)

    queue = InMemoryQueue()
    jobs = [Job(c, n) for n in range(4) for c in ("a", "b", "c")]
    await Producer(queue, app).dispatch_many(sync, jobs)
    runner = Runner(queue, app, config(num_workers=10, block_seconds=0.05))
    async with running(runner):
        # Ten free workers, twelve messages: only the limit keeps six of them waiting.
        await eventually(lambda: sum(active.values()) == 6)
        for _ in range(20):
            await asyncio.sleep(0)
        assert dict(active) == {"a": 2, "b": 2, "c": 2}
        release.set()
        await eventually(lambda: len(done) == 12)
    assert dict(peak) == {"a": 2, "b": 2, "c": 2}
    assert await queue.len() == 0


async def test_a_worker_starts_a_rate_limited_task_no_faster_than_its_rate() -> None:
    clock = FakeClock()
    app = App("limits")
    starts: list[float] = []

    @app.task(name="api", rate_limit="10/s", rate_burst=3)
    async def api(job: Job) -> None:
        starts.append(clock.monotonic())

    queue = InMemoryQueue(clock=clock)
    await Producer(queue, app, clock=clock).dispatch_many(api, [Job("x", n) for n in range(23)])
    await run_burst(Runner(queue, app, config(num_workers=8), clock=clock), clock, limit=60)

    assert len(starts) == 23
    first = starts[0]
    # GCRA with burst 3 at 10/s: the k-th start is no earlier than (k - 2) / 10 s.
    for k, at in enumerate(starts):
        assert at - first >= (k - 2) / 10 - 1e-6, f"start {k} came {at - first:.3f}s in"
    # Any one-second window holds at most rate + burst starts.
    for at in starts:
        assert sum(at <= t < at + 1.0 for t in starts) <= 10 + 3


async def test_status_says_what_a_waiting_message_waits_for() -> None:
    clock = FakeClock()
    app = App("limits")

    @app.task(name="sync", concurrency_limit=1, concurrency_key=lambda job: job.customer)
    async def sync(job: Job) -> None: ...

    @app.task(name="api", rate_limit="1/s")
    async def api(job: Job) -> None: ...

    @app.task(name="later")
    async def later(job: Job) -> None: ...

    queue = InMemoryQueue(clock=clock)
    producer = Producer(queue, app, clock=clock)
    holder, behind = await producer.dispatch_many(sync, [Job("acme"), Job("acme")])
    first_api, second_api = await producer.dispatch_many(api, [Job("x"), Job("x")])
    delayed = await producer.dispatch(later, Job("x"), delay=30)

    # Before any worker: the holder waits for its turn, and no worker receives.
    status = await producer.status(holder)
    assert status.waiting_for == (
        "its turn in 'sync:acme': the next receive that reaches the key admits it; "
        "no worker has received from this queue"
    )
    got = await queue.receive("w-1", max_messages=10, wait_seconds=0, lease_seconds=30)
    assert sorted(d.message_id for d in got) == sorted([holder, first_api])

    await clock.advance(0.25)
    slot, rate, due, running = await producer.status_many([behind, second_api, delayed, holder])
    assert slot.waiting_for == (
        f"a concurrency slot of 'sync:acme', held by {holder} "
        "(running on w-1, last heard 0.2 s ago)"
    )
    assert rate.waiting_for is not None
    assert rate.waiting_for.startswith("the rate limit of 'api': next admission at ")
    assert rate.waiting_for.endswith(".000+00:00")  # one second after the first's
    assert due.waiting_for is not None
    assert due.waiting_for.startswith("its due time (")
    assert running.waiting_for is None

    await clock.advance(120)
    stale = await producer.status(behind)
    assert stale.waiting_for is not None
    assert stale.waiting_for.endswith("; no worker has received from this queue for 120 s")


async def test_a_key_of_exactly_512_bytes_with_the_task_name_is_taken_and_513_refused() -> None:
    app = App("limits")

    @app.task(name="mail", concurrency_limit=1, concurrency_key=lambda job: job.customer)
    async def mail(job: Job) -> None: ...

    queue = InMemoryQueue()
    producer = Producer(queue, app)
    longest = "é" * ((512 - len("mail:")) // 2) + "x"  # two-byte characters: bytes count
    assert len(f"mail:{longest}".encode()) == 512
    await producer.dispatch(mail, Job(longest))
    with pytest.raises(FlowKeyError, match="over 512 bytes"):
        await producer.dispatch(mail, Job(longest + "x"))
    assert await queue.len() == 1


def test_the_contract_takes_a_flow_key_of_512_bytes_and_refuses_513() -> None:
    check_flow(Flow(key="k" * 512, rate_key="r" * 512, rate=1.0))
    for flow in (Flow(key="k" * 513), Flow(key="k", rate=1.0, rate_key="é" * 257)):
        with pytest.raises(ValueError, match="more than 512"):
            check_flow(flow)
