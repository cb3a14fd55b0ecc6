"""What flow limits cost on Redis: throughput with each limit, against the same queue without.

Run: ``python bench/flow.py`` (or ``nox -s bench-flow``); at most about 90 s on a 2-core
machine, less as admission gets faster. Options: ``--url`` (default
``TASKRUNNER_BENCH_REDIS_URL``, else a private ``redis-server`` from PATH on a free
loopback port, without persistence), ``-n`` messages per measurement (default 5000),
``--runs`` (default 3), ``--budget`` (below), ``--only NAME,...`` (the baseline is
always measured).

Each run measures these, one after the other, on one server, each on a fresh queue
(its own namespace) with the same worker settings as ``bench/throughput.py``'s e2e
(one fetcher, batches of 100, 200 concurrent tasks), in this process:

* ``unlimited``: an async no-op task, no limits (the baseline);
* ``rate``: ``rate_limit="1000000/s"`` (burst 1), a rate that never binds;
* ``rate_burst100``: the same with ``rate_burst=100`` (for information, no goal);
* ``concurrency``: ``concurrency_limit=10000``, no key (one key, never full);
* ``both``: the rate and the concurrency limit together;
* ``keys1000``: ``concurrency_limit=1`` per key over 1,000 keys (payload ``i % 1000``),
  more keys than tasks can run at once, so the limit seldom binds but every admission
  is per key.

Timed: from the start of the first task to the end of the N-th (every message
dispatched beforehand with ``dispatch_many``, untimed; the runner's start-up left out),
or, when that takes longer than ``--budget`` seconds (default 4), to the end of the
budget, over the tasks finished by then.
Each ratio is the scenario's messages/s over that of an ``unlimited`` measured right
before it (the load of a shared machine drifts); the report gives the medians over the
runs, the goal (0.85 for limits that do not bind, 0.5 for 1,000 keys) and ``ok`` or
``MISSED``. Exit status 1 when a goal is missed. The last line is one JSON object.

A given server is never flushed: each queue's keys are deleted (SCAN MATCH + UNLINK).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from throughput import private_server

import taskrunner
from taskrunner_backends.redis import open_from_url

WORKER_CONFIG: dict[str, Any] = {
    "num_fetchers": 1,
    "num_workers": 200,
    "batch_size": 100,
    "lease_seconds": 60.0,
    "block_seconds": 1.0,
}


@dataclass(frozen=True)
class Scenario:
    """One measurement: a task declared with these flow options, and its goal."""

    name: str
    options: dict[str, Any]
    goal: float | None
    key: Callable[[int], str] | None = None


def _by_thousand(i: int) -> str:
    return str(i % 1000)


SCENARIOS = [
    Scenario("unlimited", {}, None),
    Scenario("rate", {"rate_limit": "1000000/s"}, 0.85),
    Scenario("rate_burst100", {"rate_limit": "1000000/s", "rate_burst": 100}, None),
    Scenario("concurrency", {"concurrency_limit": 10_000}, 0.85),
    Scenario("both", {"rate_limit": "1000000/s", "concurrency_limit": 10_000}, 0.85),
    Scenario("keys1000", {"concurrency_limit": 1}, 0.5, _by_thousand),
]


async def measure(url: str, scenario: Scenario, n: int, budget: float) -> float:
    """Messages per second of `n` no-op tasks of `scenario` (see the module docstring)."""
    app = taskrunner.App(f"flowbench-{scenario.name}")
    done = 0
    finished = asyncio.Event()
    first = last = 0.0

    options = dict(scenario.options)
    if scenario.key is not None:
        options["concurrency_key"] = scenario.key

    @app.task(name="noop", **options)
    async def noop(i: int) -> None:
        nonlocal done, first, last
        if done == 0:
            first = time.perf_counter()
        done += 1
        last = time.perf_counter()
        if done == n:
            finished.set()

    namespace = f"flowbench-{uuid.uuid4().hex[:12]}"
    queue = await open_from_url(f"{url}?namespace={namespace}", queue_name=app.queue)
    try:
        await taskrunner.Producer(queue, app).dispatch_many(noop, range(n))
        runner = taskrunner.Runner(queue, app, taskrunner.RunnerConfig(**WORKER_CONFIG))
        run = asyncio.create_task(runner.run())
        try:
            # A slow scenario is timed over what it ran within the budget.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), budget)
            counted, ended = done, last
        finally:
            runner.stop()
            await run
        if counted < 2:
            raise SystemExit(f"{scenario.name}: {counted} tasks ran within {budget:g}s")
        # Both ends are tasks: the runner's start-up is not the limit's cost.
        return (counted - 1) / (ended - first)
    finally:
        await queue.aclose()
        await _delete_namespace(url, namespace)


async def _delete_namespace(url: str, namespace: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        batch: list[Any] = []
        async for key in client.scan_iter(match=f"{namespace}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                await client.unlink(*batch)
                batch.clear()
        if batch:
            await client.unlink(*batch)
    finally:
        await client.aclose()


async def bench(
    url: str, n: int, runs: int, budget: float, only: set[str] | None
) -> dict[str, Any]:
    chosen = [s for s in SCENARIOS if only is None or s.name in only or s.name == "unlimited"]
    print(f"n = {n}; runs = {runs}; budget {budget:g}s; worker config: {WORKER_CONFIG}", flush=True)
    rates: dict[str, list[float]] = {s.name: [] for s in chosen}
    ratios: dict[str, list[float]] = {s.name: [] for s in chosen}
    baseline = SCENARIOS[0]
    for index in range(runs):
        figures = []
        for scenario in chosen:
            # The baseline right before each scenario: the machine's load drifts.
            base = await measure(url, baseline, n, budget)
            rate = base if scenario is baseline else await measure(url, scenario, n, budget)
            rates[scenario.name].append(rate)
            ratios[scenario.name].append(rate / base)
            figures.append(f"{scenario.name} {rate:,.0f}/s ({rate / base:.2f})")
        print(f"run {index + 1}: " + ", ".join(figures), flush=True)
    print(f"median of {runs} run(s), ratio = msg/s / unlimited msg/s of the same run:")
    missed = []
    report: dict[str, Any] = {"n": n, "runs": runs}
    for scenario in chosen:
        rate = statistics.median(rates[scenario.name])
        ratio = statistics.median(ratios[scenario.name])
        if scenario.goal is None:
            verdict = "(baseline)" if scenario.name == "unlimited" else "(no goal)"
        else:
            verdict = f"goal >= {scenario.goal:.2f}: " + (
                "ok" if ratio >= scenario.goal else "MISSED"
            )
            if ratio < scenario.goal:
                missed.append(scenario.name)
        print(f"  {scenario.name:<14} {rate:>9,.0f} msg/s  ratio {ratio:5.2f}  {verdict}")
        report[scenario.name] = {"msg_per_s": round(rate), "ratio": round(ratio, 3)}
    report["missed"] = missed
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("TASKRUNNER_BENCH_REDIS_URL"))
    parser.add_argument("-n", type=int, default=5000, help="messages per measurement")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--budget", type=float, default=4.0, help="seconds a measurement may run at most"
    )
    parser.add_argument("--only", help="comma-separated scenario names (plus the baseline)")
    args = parser.parse_args(argv)
    only = None if args.only is None else set(args.only.split(","))
    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(private_server("redis"))
        report = asyncio.run(bench(url, args.n, args.runs, args.budget, only))
    print(json.dumps(report))
    return 1 if report["missed"] else 0


if __name__ == "__main__":
    sys.exit(main())
