"""`SyncProducer` checks every backend runs: the same calls on memory, Redis, Cluster, PostgreSQL.

Each function takes a backend URL (its queue namespace or schema already in it) and
asserts; the per-backend test files call them. Workers run in burst mode in this
process, on the test's thread, after the dispatches (the SyncProducer's calls run on
its own thread; none is in flight meanwhile).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from taskrunner import (
    App,
    PayloadValidationError,
    QueueClosedError,
    RunnerConfig,
    SyncProducer,
    TaskState,
    UnknownTaskError,
    open_queue,
)
from taskrunner.runner import Runner

app = App("sync-producer-tests")

RAN: list[int] = []


@app.task(store_result=True)
async def double(n: int) -> int:
    """Returns twice `n`, recording that it ran."""
    RAN.append(n)
    return 2 * n


@app.task
async def tick() -> None:
    """Takes no payload."""


def run_worker(url: str) -> None:
    """Run a worker on `url` in burst mode until the ready messages are done."""

    async def main() -> None:
        async with open_queue(url, app.queue) as queue:
            await Runner(queue, app, RunnerConfig(block_seconds=0.2)).run(burst=True)

    asyncio.run(main())


def every_method(url: str) -> None:
    """dispatch (every option), dispatch_many, status(_many), cancel(_many), result."""
    RAN.clear()
    with SyncProducer(url, app) as producer:
        plain = producer.dispatch(double, 1)
        assert plain.added
        by_name = producer.dispatch("tests.sync_producer_cases.double", 2, headers={"h": "v"})
        many = producer.dispatch_many(double, [3, 4, 5])
        assert many.added == [True, True, True]
        later = producer.dispatch(double, 6, delay=timedelta(hours=1))
        at = producer.dispatch(double, 7, at=datetime.now(UTC) + timedelta(hours=1))
        first = producer.dispatch(double, 8, unique_key="only-once")
        again = producer.dispatch(double, 9, unique_key="only-once")
        assert first.added
        assert not again.added
        assert again == first
        keyed = producer.dispatch(double, 10, partition_key="p1")
        doomed = producer.dispatch(double, 11)
        ids = [plain, by_name, *many, later, at, first, keyed, doomed]
        assert len(set(ids)) == len(ids)

        assert producer.status(later).state == TaskState.DELAYED
        states = producer.status_many([plain, at])
        assert [s.state for s in states] == [TaskState.READY, TaskState.DELAYED]
        assert producer.cancel(doomed) is True
        assert producer.cancel(doomed) is False
        assert producer.cancel_many([later, at]) == [True, True]

        run_worker(url)
        assert sorted(RAN) == [1, 2, 3, 4, 5, 8, 10]
        assert producer.result(plain, timeout=5) == 2
        assert [producer.result(i, timeout=5) for i in many] == [6, 8, 10]
        assert producer.status(keyed).state == TaskState.SUCCEEDED


def result_times_out(url: str) -> None:
    """`result` of a message nobody runs raises TimeoutError after about `timeout`."""
    with SyncProducer(url, app) as producer:
        message_id = producer.dispatch(double, 1)
        with pytest.raises(TimeoutError, match="no result"):
            producer.result(message_id, timeout=0.2)


def errors_are_typed_and_raised_in_the_calling_thread(url: str) -> None:
    """The async producer's error types, raised in the thread that called."""
    with SyncProducer(url, app) as producer:
        producer.dispatch(tick)  # opened: the checks below also cover the open path
        caught: dict[str, tuple[type[BaseException], int]] = {}

        def attempt(name: str, call: Callable[[], object]) -> None:
            try:
                call()
            except Exception as exc:
                caught[name] = (type(exc), threading.get_ident())

        calls: dict[str, Callable[[], object]] = {
            "unknown": lambda: producer.dispatch("no-such-task", 1),
            "payload": lambda: producer.dispatch(double, cast(Any, "not a number")),
            "delay": lambda: producer.dispatch(double, 1, delay=-1),
            "many": lambda: producer.dispatch_many(double, cast(Any, [1, "x"])),
            "status": lambda: producer.status_many("one-str"),
        }
        threads = {
            name: threading.Thread(target=attempt, args=(name, c)) for name, c in calls.items()
        }
        for thread in threads.values():
            thread.start()
        for thread in threads.values():
            thread.join(10)
        assert caught["unknown"][0] is UnknownTaskError
        assert caught["payload"][0] is PayloadValidationError
        assert caught["delay"][0] is ValueError
        assert caught["many"][0] is PayloadValidationError
        assert caught["status"][0] is TypeError
        for name, (_, ident) in caught.items():
            assert ident == threads[name].ident


def many_threads_share_one_instance(url: str, *, threads: int = 8, each: int = 40) -> None:
    """Threads dispatching at once through one instance: all ids distinct, all delivered."""
    RAN.clear()
    results: dict[int, list[str]] = {}
    start = threading.Barrier(threads)
    with SyncProducer(url, app) as producer:

        def work(index: int) -> None:
            start.wait()
            mine: list[str] = []
            for i in range(each):
                n = index * each + i
                # Alternate the calling thread's fast path and the loop thread's.
                mine.append(producer.dispatch(double, n, delay=0 if i % 2 else None))
            results[index] = mine

        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        ids = [i for mine in results.values() for i in mine]
        assert len(ids) == threads * each
        assert len(set(ids)) == len(ids)
        run_worker(url)
        assert sorted(RAN) == list(range(threads * each))


def closed_means_closed(url: str) -> None:
    """close() is idempotent, stops the thread, and later calls get QueueClosedError."""
    producer = SyncProducer(url, app)
    producer.dispatch(tick)
    loop_threads = [t for t in threading.enumerate() if t.name.startswith("taskrunner-sync")]
    assert loop_threads
    producer.close()
    producer.close()
    assert producer.closed
    assert all(not t.is_alive() for t in loop_threads)
    for call in (
        lambda: producer.dispatch(tick),
        lambda: producer.dispatch_many(double, [1]),
        lambda: producer.status("1-0"),
        lambda: producer.cancel("1-0"),
        lambda: producer.result("1-0", timeout=0),
    ):
        with pytest.raises(QueueClosedError, match="closed"):
            call()


def close_cancels_a_call_in_flight(url: str) -> None:
    """A `result` still waiting when close's grace ends raises QueueClosedError."""
    producer = SyncProducer(url, app)
    message_id = producer.dispatch(double, 1)
    outcome: list[BaseException] = []
    waiting = threading.Event()

    def wait_for_it() -> None:
        waiting.set()
        try:
            producer.result(message_id, timeout=60)
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    waiting.wait(10)
    producer.close(timeout=0.3)
    waiter.join(10)
    assert not waiter.is_alive()
    assert len(outcome) == 1, outcome
    assert isinstance(outcome[0], QueueClosedError), outcome


def works_after_fork(
    url: str,
    *,
    child_check: Callable[[SyncProducer], str] | None = None,
    shared_store: bool = True,
) -> str:
    """An instance made and used before fork works in the child and, after, in the parent.

    `shared_store`: parent and child reach one store (a server; memory:// is copied by
    the fork, so ids may repeat across the two).

    The child dispatches, reads the status back and reports through a pipe (plus what
    `child_check` returns, e.g. its connection's id); it exits with os._exit. Returns
    that report.
    """
    with SyncProducer(url, app) as producer:
        before = producer.dispatch(double, 1)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report, never return into pytest
            code = 1
            try:
                os.close(read_end)
                in_child = producer.dispatch(double, 2)
                state = producer.status(in_child).state
                extra = child_check(producer) if child_check is not None else ""
                os.write(write_end, f"{in_child} {state.value} {extra}".encode())
                producer.close()
                code = 0
            except BaseException as exc:
                os.write(write_end, f"error {type(exc).__name__}: {exc}".encode())
            finally:
                os._exit(code)
        os.close(write_end)
        chunks = []
        while chunk := os.read(read_end, 4096):
            chunks.append(chunk)
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
        report = b"".join(chunks).decode()
        assert os.waitstatus_to_exitcode(status) == 0, report
        child_id, child_state, *_ = report.split(" ")
        assert child_state == TaskState.READY.value, report
        after = producer.dispatch(double, 3)
        assert len({before, child_id, after}) == 3 if shared_store else before != after
        assert producer.status(before).state == TaskState.READY
        assert producer.status(after).state == TaskState.READY
        return report
