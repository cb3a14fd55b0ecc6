"""``python -m taskrunner`` as a real process: help, signals, exit codes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
import redis

from taskrunner import Producer, open_queue
from tests.cli.apps import QUEUE, Block, Slow, app

ROOT = Path(__file__).resolve().parents[2]

# Upper bound for anything we wait for; generous for a loaded CI machine.
DEADLINE_SECONDS = 30.0


class Process:
    """``python -m taskrunner ARGV`` from the checkout; stdout and stderr collected by threads."""

    def __init__(self, *argv: str) -> None:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("TASKRUNNER_") or k.startswith("TASKRUNNER_TEST_")
        }
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "taskrunner", *argv],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: list[str] = []
        self._out: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.popen.stderr, self._lines), daemon=True),
            threading.Thread(target=self._read, args=(self.popen.stdout, self._out), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: IO[str] | None, lines: list[str]) -> None:
        assert stream is not None
        for line in stream:
            lines.append(line)

    @property
    def err(self) -> str:
        """Everything written to stderr so far."""
        return "".join(self._lines)

    @property
    def out(self) -> str:
        """Everything written to stdout so far."""
        return "".join(self._out)

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def wait(self) -> int:
        """Wait for the exit (bounded) and the last output; returns the exit code."""
        try:
            code = self.popen.wait(timeout=DEADLINE_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running after {DEADLINE_SECONDS}s:\n{self.err}")
        for reader in self._readers:
            reader.join(timeout=DEADLINE_SECONDS)
        for stream in (self.popen.stderr, self.popen.stdout):
            if stream is not None:
                stream.close()
        return code

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        """Poll `condition` until it holds; fail with the output at the deadline."""
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not condition():
            if self.popen.poll() is not None:
                self.wait()
                pytest.fail(f"{what}: the worker exited with {self.popen.returncode}:\n{self.err}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not after {DEADLINE_SECONDS}s:\n{self.err}")
            time.sleep(0.02)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.wait()


@pytest.fixture
def start() -> Iterator[Callable[..., Process]]:
    """Start processes; any still running at the end of the test is killed by pid."""
    started: list[Process] = []

    def launch(*argv: str) -> Process:
        process = Process(*argv)
        started.append(process)
        return process

    yield launch
    for process in started:
        process.kill()


def dispatch_slow(url: str, directory: Path, seconds: float) -> None:
    async def send() -> None:
        async with open_queue(url, QUEUE) as queue:
            await Producer(queue, app).dispatch("cli.slow", Slow(str(directory), seconds))

    asyncio.run(send())


def counts(url: str) -> tuple[int, int, int]:
    async def read() -> tuple[int, int, int]:
        async with open_queue(url, QUEUE) as queue:
            stats = await queue.stats()
            return stats.ready, stats.in_flight, stats.dead

    return asyncio.run(read())


def test_python_m_taskrunner_help_exits_0() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "taskrunner", "--help"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS,
        check=False,
    )

    assert result.returncode == 0
    assert "worker" in result.stdout


def test_unreachable_backend_exits_1_with_one_line(start: Callable[..., Process]) -> None:
    worker = start("worker", "tests.cli.apps:app", "--url", "redis://127.0.0.1:1/0")

    assert worker.wait() == 1
    assert worker.err.splitlines()[-1].startswith("taskrunner: backend error: INFO server: server")
    assert "Traceback" not in worker.err


@pytest.mark.redis
def test_worker_finishes_and_acks_the_running_task_on_sigterm_and_exits_0(
    redis_ns_url: str, tmp_path: Path, start: Callable[..., Process]
) -> None:
    dispatch_slow(redis_ns_url, tmp_path, seconds=1.5)
    worker = start("worker", "tests.cli.apps:app", "--url", redis_ns_url, "--num-workers", "2")
    worker.wait_until((tmp_path / "started").exists, "the task started")

    worker.signal(signal.SIGTERM)

    assert worker.wait() == 0, worker.err
    assert (tmp_path / "finished").read_text() == "ok"
    assert counts(redis_ns_url) == (0, 0, 0)
    assert "SIGTERM received: stopping; running tasks get up to 30s to finish" in worker.err
    assert "worker stopped" in worker.err
    assert "succeeded=1" in worker.err


@pytest.mark.redis
def test_a_second_sigterm_cancels_the_running_task_and_releases_its_message(
    redis_ns_url: str, tmp_path: Path, start: Callable[..., Process]
) -> None:
    dispatch_slow(redis_ns_url, tmp_path, seconds=120)
    worker = start(
        "worker",
        "tests.cli.apps:app",
        "--url",
        redis_ns_url,
        "--drain-timeout-seconds",
        "120",
    )
    worker.wait_until((tmp_path / "started").exists, "the task started")

    worker.signal(signal.SIGTERM)
    worker.wait_until(lambda: "draining 1 running task(s)" in worker.err, "draining")
    worker.signal(signal.SIGTERM)

    assert worker.wait() == 0, worker.err
    assert not (tmp_path / "finished").exists()
    assert "SIGTERM received again: cancelling running tasks" in worker.err
    assert counts(redis_ns_url) == (1, 0, 0)


@pytest.mark.redis
def test_sigint_stops_an_idle_worker_with_exit_0(
    redis_ns_url: str, start: Callable[..., Process]
) -> None:
    worker = start("worker", "tests.cli.apps:app", "--url", redis_ns_url)
    worker.wait_until(lambda: "worker started" in worker.err, "the worker started")

    worker.signal(signal.SIGINT)

    assert worker.wait() == 0, worker.err
    assert "SIGINT received: stopping" in worker.err


def consumers_of(url: str, name: str = QUEUE) -> list[str]:
    async def read() -> list[str]:
        async with open_queue(url, name) as queue:
            return [consumer.name for consumer in (await queue.stats()).consumers]

    return asyncio.run(read())


@pytest.mark.redis
def test_a_worker_removes_its_own_consumers_when_it_stops_cleanly(
    redis_ns_url: str, tmp_path: Path, start: Callable[..., Process]
) -> None:
    dispatch_slow(redis_ns_url, tmp_path, seconds=0)
    worker = start("worker", "tests.cli.apps:app", "--url", redis_ns_url)
    worker.wait_until((tmp_path / "finished").exists, "the task ran")
    worker.wait_until(lambda: counts(redis_ns_url) == (0, 0, 0), "the task was acked")
    # The fetcher that received the task is a consumer of the group, holding nothing.
    [consumer] = consumers_of(redis_ns_url)
    assert consumer.endswith(":f0")

    worker.signal(signal.SIGTERM)

    assert worker.wait() == 0, worker.err
    assert consumers_of(redis_ns_url) == []
    assert "could not remove" not in worker.err


@pytest.mark.redis
def test_an_interrupted_demo_on_redis_leaves_no_key_behind(
    redis_url: str, redis_ns_url: str, redis_namespace: str, start: Callable[..., Process]
) -> None:
    # Two workers for 2000 tasks of 10-100 ms: still running when the signal comes.
    demo = start("demo", "--url", redis_ns_url, "--tasks", "2000", "--num-workers", "2")
    demo.wait_until(lambda: "dispatched 2000 tasks" in demo.out, "the demo dispatched")

    demo.signal(signal.SIGINT)

    assert demo.wait() == 0, demo.err
    assert "Traceback" not in demo.err
    processed = int(demo.out.split("processed")[1].split()[0])
    assert processed < 2000
    client = redis.Redis.from_url(redis_url)
    try:
        assert list(client.scan_iter(match=f"{redis_namespace}:*")) == []
    finally:
        client.close()


def dispatch_block(url: str, directory: Path) -> None:
    async def send() -> None:
        async with open_queue(url, QUEUE) as queue:
            await Producer(queue, app).dispatch("cli.block", Block(str(directory)))

    asyncio.run(send())


def in_flight_idle(url: str) -> float | None:
    async def read() -> float | None:
        async with open_queue(url, QUEUE) as queue:
            return (await queue.stats()).oldest_in_flight_age_seconds

    return asyncio.run(read())


def force_stop_with_a_thread_running(
    url: str, directory: Path, start: Callable[..., Process], first: int, second: int
) -> Process:
    """A worker running cli.block in a thread, after two signals: waiting for the thread."""
    dispatch_block(url, directory)
    worker = start(
        "worker",
        "tests.cli.apps:app",
        "--url",
        url,
        "--drain-timeout-seconds",
        "120",
        "--lease-seconds",
        "2",
    )
    worker.wait_until((directory / "started").exists, "the thread task started")
    worker.signal(first)
    worker.wait_until(lambda: "draining 1 running task(s)" in worker.err, "draining")
    worker.signal(second)
    worker.wait_until(
        lambda: "send another signal to exit now" in worker.err, "the second signal was handled"
    )
    return worker


@pytest.mark.redis
def test_a_forced_stop_says_which_thread_it_waits_for_and_keeps_its_lease(
    redis_ns_url: str, tmp_path: Path, start: Callable[..., Process]
) -> None:
    worker = force_stop_with_a_thread_running(
        redis_ns_url, tmp_path, start, signal.SIGTERM, signal.SIGTERM
    )

    assert (
        "SIGTERM received again: cancelling running async tasks and releasing their "
        "messages; waiting for 1 thread task(s) to return: cli.block; their leases are "
        "kept; send another signal to exit now"
    ) in worker.err
    # Only a thread runs: no word about async tasks being cancelled.
    assert "async task(s) still running" not in worker.err
    assert "worker stopped" not in worker.err
    # The lease is still heartbeated: its idle time drops back after the signal.
    first = in_flight_idle(redis_ns_url)
    assert first is not None
    worker.wait_until(
        lambda: (idle := in_flight_idle(redis_ns_url)) is not None and idle < first,
        "a heartbeat after the second signal",
    )

    (tmp_path / "release").write_text("go")

    assert worker.wait() == 0, worker.err
    assert (tmp_path / "finished").read_text() == "ok"
    assert counts(redis_ns_url) == (0, 0, 0)  # acked: the lease was still its own
    assert "lease lost" not in worker.err
    assert "Traceback" not in worker.err
    assert worker.err.index("send another signal") < worker.err.index("worker stopped")


@pytest.mark.redis
@pytest.mark.parametrize(
    "signals",
    [
        (signal.SIGTERM, signal.SIGTERM, signal.SIGTERM),
        (signal.SIGINT, signal.SIGINT, signal.SIGINT),
        (signal.SIGTERM, signal.SIGTERM, signal.SIGINT),
    ],
    ids=["term", "int", "term-term-int"],
)
def test_a_third_signal_exits_at_once_and_leaves_the_thread_lease_to_lapse(
    redis_ns_url: str,
    tmp_path: Path,
    start: Callable[..., Process],
    signals: tuple[int, int, int],
) -> None:
    worker = force_stop_with_a_thread_running(redis_ns_url, tmp_path, start, *signals[:2])

    worker.signal(signals[2])

    assert worker.wait() == 0, worker.err
    name = signal.Signals(signals[2]).name
    assert (
        f"{name} received a third time: exiting now, with 1 thread task(s) still running: "
        "cli.block; their messages stay leased and are redelivered once their leases lapse "
        "(safe: the threads end with this process)"
    ) in worker.err
    assert "Traceback" not in worker.err
    assert "Exception ignored" not in worker.err
    assert not (tmp_path / "finished").exists()
    assert counts(redis_ns_url) == (0, 1, 0)  # left leased, not released to run twice
