"""Fairness across keys: how long small keys wait behind one key's backlog.

Run: ``python bench/flow_fairness.py [URL]`` (``nox -s bench-flow-fairness``; URL
defaults to ``memory://``; a ``redis://`` or ``postgresql://`` URL gets a fresh
namespace or schema per run). Options: ``--backlog`` (default 10000), ``--keys``
(default 20), ``--per-key`` (default 10), ``--workers`` (default 8).

One key dispatches ``backlog`` messages, then ``keys`` other keys ``per-key`` each; one
worker (``workers`` concurrent tasks, async no-op) runs them all. Printed for two runs
of the same dispatch, one with ``fairness_key`` (keys take turns) and one without
(one FIFO): the completion position of the last small-key message and the mean
position of the small-key messages, out of every message. With turns, the small keys
are done after ``(keys + 1) x per-key`` completions (each round serves the backlog's
key once and every small key once) whatever the backlog; without, after the whole
backlog. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import uuid
from typing import Any

from taskrunner import App, Producer, Runner, RunnerConfig, open_queue


def _url_for_run(url: str) -> str:
    """`url` with a fresh namespace (Redis) or schema (PostgreSQL), so runs share nothing."""
    tag = f"fair-{uuid.uuid4().hex[:8]}"
    joiner = "&" if "?" in url else "?"
    if url.startswith(("redis://", "rediss://", "redis+cluster://")):
        return f"{url}{joiner}namespace={tag}"
    if url.startswith(("postgresql://", "postgres://")):
        return f"{url}{joiner}schema={tag.replace('-', '_')}"
    return f"memory://{tag}" if url.startswith("memory://") else url


async def one_run(url: str, args: argparse.Namespace, *, fair: bool) -> dict[str, Any]:
    app = App("fairness")
    order: list[str] = []
    key = (lambda job: job[0]) if fair else None

    @app.task(name="job", fairness_key=key)
    async def job(item: list[str]) -> None:
        order.append(item[0])

    total = args.backlog + args.keys * args.per_key
    run_url = _url_for_run(url)
    async with open_queue(run_url, app.queue) as queue:
        producer = Producer(queue, app)
        await producer.dispatch_many(job, [["big", str(i)] for i in range(args.backlog)])
        small = [[f"small-{k}", str(i)] for i in range(args.per_key) for k in range(args.keys)]
        await producer.dispatch_many(job, small)
        runner = Runner(queue, app, RunnerConfig(num_workers=args.workers, block_seconds=0.1))
        await asyncio.wait_for(runner.run(burst=True), 600)
        admin = queue.admin
        if admin is not None:
            await admin.delete_queue()
    assert len(order) == total, f"{len(order)} of {total} messages ran"
    positions = [i + 1 for i, name in enumerate(order) if name != "big"]
    return {
        "fair": fair,
        "messages": total,
        "last_small_position": max(positions),
        "mean_small_position": round(statistics.fmean(positions), 1),
    }


async def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default="memory://")
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--per-key", type=int, default=10)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args(argv)
    fair = await one_run(args.url, args, fair=True)
    fifo = await one_run(args.url, args, fair=False)
    for row in (fair, fifo):
        label = "fairness_key" if row["fair"] else "no key (FIFO)"
        print(
            f"{label:>14}: last small-key message finished at position "
            f"{row['last_small_position']:>6} of {row['messages']}, "
            f"mean {row['mean_small_position']:>8}"
        )
    summary = {
        "url": args.url.split("?")[0],
        "fair": fair,
        "fifo": fifo,
        "ideal_last_small_position": (args.keys + 1) * args.per_key,
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    asyncio.run(main())
