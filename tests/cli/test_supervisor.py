"""``taskrunner worker --processes``: parsing, the children's argv, and the supervisor's rules.

The supervisor runs here on a `FakeClock` with fake children (their exits are decided
by each test), so the restart backoff is checked to the millisecond without waiting.
The real-process behaviour is tested in tests/redis/test_supervisor_processes.py.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from taskrunner.cli import _parser
from taskrunner.cli.supervisor import (
    Backoff,
    ChildProcess,
    Processes,
    Supervisor,
    available_cpus,
    child_argv,
    describe_exit,
    parse_processes,
)
from taskrunner.settings import KEYS, flag_name
from taskrunner.testing import FakeClock
from tests.cli.conftest import Cli

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 30.0


# --- parsing and validation -------------------------------------------------------


def test_processes_parses_integers_and_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)

    assert parse_processes("3") == Processes(3)
    assert parse_processes("auto") == Processes(3, auto=True)
    assert parse_processes(" AUTO ") == Processes(3, auto=True)
    assert available_cpus() == 3


def test_auto_uses_the_cpu_count_without_an_affinity_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)

    assert parse_processes("auto") == Processes(6, auto=True)


def test_the_default_is_one_process_in_this_process() -> None:
    args = _parser().parse_args(["worker", "tests.cli.apps:app"])

    assert args.processes == Processes(1)
    assert args.supervised_by is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "argument --processes: 0 must be >= 1 (or 'auto')"),
        ("-2", "argument --processes: -2 must be >= 1 (or 'auto')"),
        ("x", "argument --processes: 'x' is neither an integer nor 'auto'"),
        ("1.5", "argument --processes: '1.5' is neither an integer nor 'auto'"),
    ],
)
def test_a_bad_process_count_is_a_usage_error_naming_the_flag(
    run: Cli, memory_url: str, value: str, message: str
) -> None:
    result = run("worker", "tests.cli.apps:app", "--url", memory_url, "--processes", value)

    assert result.code == 2
    assert message in result.err


@pytest.mark.parametrize("value", ["2", "auto"])
def test_several_processes_on_memory_are_refused(run: Cli, memory_url: str, value: str) -> None:
    result = run("worker", "tests.cli.apps:app", "--url", memory_url, "--processes", value)

    assert result.code == 2
    assert result.err.startswith(f"taskrunner: --processes {value}: backend memory:// lives in one")
    assert "use a shared backend such as redis://" in result.err


def test_one_process_on_memory_is_the_worker_of_today(run: Cli, memory_url: str) -> None:
    result = run("worker", "tests.cli.apps:app", "--url", memory_url, "--processes", "1", "--burst")

    assert result.code == 0, result.err
    assert "supervisor" not in result.err
    assert "worker stopped" in result.err


def test_a_bad_app_is_reported_by_the_supervisor_before_any_child_starts(run: Cli) -> None:
    result = run(
        "worker", "tests.cli.apps:nothing", "--url", "redis://127.0.0.1:1/0", "--processes", "2"
    )

    assert result.code == 2
    assert "nothing" in result.err
    assert "worker process" not in result.err


def test_metrics_ports_beyond_65535_are_refused(run: Cli) -> None:
    result = run(
        "worker",
        "tests.cli.apps:app",
        "--url",
        "redis://127.0.0.1:1/0",
        "--processes",
        "3",
        "--metrics-port",
        "65534",
    )

    assert result.code == 2
    assert "--processes 3: child i serves metrics on metrics_port + i" in result.err


# --- the children's command line --------------------------------------------------


def test_a_child_gets_the_same_worker_command_without_processes() -> None:
    args = _parser().parse_args(
        [
            "worker",
            "tests.cli.apps:app",
            "--config",
            "conf/worker.toml",
            "--url",
            "redis://h:6379/0?namespace=n",
            "--processes",
            "4",
            "--num-workers",
            "7",
            "--lease-seconds",
            "-1",  # nonsense, but passed on as given: the child reports it
            "--burst",
            "--log-format",
            "json",
        ]
    )

    assert child_argv(args, parent=123) == [
        "worker",
        "tests.cli.apps:app",
        "--config=conf/worker.toml",
        "--url=redis://h:6379/0?namespace=n",
        "--num-workers=7",
        "--lease-seconds=-1",
        "--log-format=json",
        "--burst",
        "--supervised-by=123",
    ]
    reparsed = _parser().parse_args(child_argv(args, parent=123))
    assert reparsed.processes == Processes(1)
    assert reparsed.supervised_by == 123
    assert getattr(reparsed, "setting:lease_seconds") == "-1"


def test_each_child_gets_its_own_metrics_port() -> None:
    args = _parser().parse_args(["worker", "--app", "m:app", "--metrics-port", "9100"])

    assert child_argv(args, parent=1, metrics_port=9101) == [
        "worker",
        "--app=m:app",
        "--metrics-port=9101",
        "--supervised-by=1",
    ]


def test_every_flag_of_the_worker_reaches_the_children() -> None:
    words = ["worker", "m:app", "--processes", "2"]
    for key in KEYS:
        if key.name not in ("log_level", "log_format"):
            words += [flag_name(key.name), "v"]
    args = _parser().parse_args(words)

    passed = child_argv(args, parent=1)

    for key in KEYS:
        if key.name not in ("log_level", "log_format"):
            assert f"{flag_name(key.name)}=v" in passed, key.name


def test_an_option_the_supervisor_does_not_know_is_never_dropped_silently() -> None:
    args = argparse.Namespace(command="worker", app_argument="m:app", new_flag=True)

    with pytest.raises(RuntimeError, match="'new_flag'"):
        child_argv(args, parent=1)


# --- the supervisor, on a fake clock -----------------------------------------------


class FakeChild:
    """A child whose exit the test decides (`exit`); signals are recorded."""

    def __init__(self, pid: int, index: int, born: float) -> None:
        self.pid = pid
        self.index = index
        self.born = born
        self.returncode: int | None = None
        self.signals: list[int] = []
        self._exited = asyncio.Event()
        self.on_signal: Callable[[FakeChild, int], None] | None = None

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int, /) -> None:
        self.signals.append(signum)
        if self.on_signal is not None:
            self.on_signal(self, signum)

    def exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()


class Children:
    """The fake spawn: every child it started, in order."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.started: list[FakeChild] = []
        self.fail_next = 0
        self.on_signal: Callable[[FakeChild, int], None] | None = None
        self.on_start: Callable[[FakeChild], None] | None = None

    async def spawn(self, index: int) -> ChildProcess:
        await asyncio.sleep(0)
        if self.fail_next:
            self.fail_next -= 1
            raise OSError("fork failed: resource temporarily unavailable")
        child = FakeChild(1000 + len(self.started), index, self.clock.monotonic())
        child.on_signal = self.on_signal
        self.started.append(child)
        if self.on_start is not None:
            self.on_start(child)
        return child

    def running(self, index: int) -> FakeChild:
        [child] = [c for c in self.started if c.index == index and c.returncode is None]
        return child

    def of(self, index: int) -> list[FakeChild]:
        return [c for c in self.started if c.index == index]

    def has(self, index: int, count: int) -> Callable[[], bool]:
        """A condition: `count` children were started in slot `index`."""
        return lambda: len(self.of(index)) == count


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def start(
    processes: int, backoff: Backoff | None = None
) -> tuple[FakeClock, Children, Supervisor, asyncio.Task[int]]:
    clock = FakeClock()
    children = Children(clock)
    supervisor = Supervisor(processes, children.spawn, clock=clock, backoff=backoff)
    return clock, children, supervisor, asyncio.create_task(supervisor.run())


def exit_on_signal(child: FakeChild, signum: int) -> None:
    child.exit(0)


async def test_a_dying_child_is_restarted_with_doubling_backoff_up_to_the_cap() -> None:
    clock, children, supervisor, run = start(2)
    await settle()
    assert len(children.started) == 2

    waits = []
    for deaths in range(1, 10):
        died = clock.monotonic()
        children.running(0).exit(-signal.SIGKILL)
        await clock.run_until(children.has(0, deaths + 1), step=0.01, limit=60)
        waits.append(round(children.of(0)[-1].born - died, 6))

    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert len(children.of(1)) == 1  # the other child was left alone

    for child in children.started:
        child.on_signal = exit_on_signal
    supervisor.on_signal(signal.SIGTERM)
    assert await run == 0


def test_the_backoff_schedule_and_its_cap() -> None:
    backoff = Backoff()

    assert [backoff.delay(n) for n in range(1, 9)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert backoff.delay(100_000) == 30.0


async def test_a_child_that_stayed_up_long_enough_restarts_after_the_first_delay_again() -> None:
    clock, children, supervisor, run = start(1, Backoff(reset_after_seconds=60))
    await settle()
    waits = []
    for deaths in range(1, 5):  # three quick deaths (the next wait would be 4 s), then
        if deaths == 4:
            await clock.advance(60)  # this one stays up a minute
        died = clock.monotonic()
        children.running(0).exit(1)
        await clock.run_until(children.has(0, deaths + 1), step=0.01, limit=60)
        waits.append(round(children.of(0)[-1].born - died, 6))

    assert waits == [0.5, 1.0, 2.0, 0.5]

    children.running(0).on_signal = exit_on_signal
    supervisor.on_signal(signal.SIGINT)
    assert await run == 0


async def test_deaths_and_restarts_are_logged_with_the_exit_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="taskrunner.cli")
    clock, children, supervisor, run = start(1)
    await settle()
    children.running(0).exit(-signal.SIGKILL)
    await clock.run_until(lambda: len(children.of(0)) == 2, step=0.01, limit=5)
    children.running(0).exit(3)
    await clock.run_until(lambda: len(children.of(0)) == 3, step=0.01, limit=5)

    messages = [r.getMessage() for r in caplog.records if r.name == "taskrunner.cli"]
    assert (
        "worker process 0 (pid 1000) died: killed by SIGKILL after 0.0s; restarting it in 0.5s"
        in messages
    )
    assert "restarting worker process 0 (death 1 in a row)" in messages
    assert (
        "worker process 0 (pid 1001) died: exit code 3 after 0.0s; restarting it in 1s" in messages
    )
    assert "worker process 0 started: pid 1002" in messages

    children.running(0).on_signal = exit_on_signal
    supervisor.on_signal(signal.SIGTERM)
    assert await run == 0


async def test_children_exiting_0_on_their_own_are_not_restarted_and_the_supervisor_ends() -> None:
    clock, children, _, run = start(3)
    await settle()
    for child in list(children.started):
        child.exit(0)  # --burst: the queue was empty

    assert await asyncio.wait_for(run, DEADLINE_SECONDS) == 0
    assert len(children.started) == 3
    assert clock.monotonic() == 0


async def test_every_signal_is_forwarded_to_every_running_child() -> None:
    _, children, supervisor, run = start(3)
    await settle()

    supervisor.on_signal(signal.SIGTERM)
    supervisor.on_signal(signal.SIGINT)
    await settle()

    assert [child.signals for child in children.started] == [[signal.SIGTERM, signal.SIGINT]] * 3
    assert not run.done()  # still waiting for them
    for child in children.started:
        child.exit(0)
    assert await run == 0


async def test_no_restart_after_a_signal_and_the_failed_child_is_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, children, supervisor, run = start(2)
    await settle()
    supervisor.on_signal(signal.SIGTERM)
    children.running(0).exit(0)
    children.running(1).exit(1)  # failed while draining

    assert await run == 1
    assert len(children.started) == 2
    assert "worker process 1 (pid 1001) failed: exit code 1" in caplog.text


async def test_a_signal_during_the_backoff_ends_the_wait_without_a_restart() -> None:
    clock, children, supervisor, run = start(2)
    await settle()
    children.running(0).exit(-signal.SIGSEGV)
    await settle()
    children.running(1).on_signal = exit_on_signal

    supervisor.on_signal(signal.SIGTERM)

    assert await asyncio.wait_for(run, DEADLINE_SECONDS) == 1  # child 0's last exit failed
    assert clock.monotonic() == 0
    assert len(children.of(0)) == 1


async def test_a_child_stopped_by_the_forwarded_signal_before_its_handlers_exist_is_clean() -> None:
    _, children, supervisor, run = start(2)
    await settle()
    supervisor.on_signal(signal.SIGINT)
    children.running(0).exit(-signal.SIGINT)
    children.running(1).exit(130)  # KeyboardInterrupt while importing

    assert await run == 0


async def test_a_child_started_while_the_signal_came_gets_it_too() -> None:
    clock, children, supervisor, run = start(1)
    await settle()
    children.running(0).exit(1)
    await settle()

    def signal_now(child: FakeChild) -> None:
        if len(children.started) == 2:
            supervisor.on_signal(signal.SIGTERM)  # before the spawn returned

    children.on_start = signal_now
    await clock.run_until(lambda: len(children.started) == 2, step=0.01, limit=5)
    await settle()

    assert children.started[1].signals == [signal.SIGTERM]
    children.started[1].exit(0)
    assert await run == 0


async def test_a_configuration_error_of_a_child_stops_all_and_exits_2(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, children, _, run = start(3)
    await settle()
    children.on_signal = exit_on_signal
    for child in children.started:
        child.on_signal = exit_on_signal

    children.running(1).exit(2)

    assert await asyncio.wait_for(run, DEADLINE_SECONDS) == 2
    assert [child.signals for child in children.started] == [[signal.SIGTERM], [], [signal.SIGTERM]]
    assert "a restart would repeat" in caplog.text


async def test_a_child_that_cannot_be_started_is_retried_with_backoff() -> None:
    clock, children, supervisor, run = start(1)
    children.fail_next = 2
    await clock.run_until(lambda: len(children.started) == 1, step=0.01, limit=5)

    assert clock.monotonic() == pytest.approx(1.5)  # 0.5 s, then 1 s
    children.running(0).on_signal = exit_on_signal
    supervisor.on_signal(signal.SIGTERM)
    assert await run == 0


def test_exit_statuses_in_words() -> None:
    assert describe_exit(0) == "exit code 0"
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(-200) == "killed by signal 200"
    assert describe_exit(None) == "could not be started"


# --- a child notices its supervisor's death ----------------------------------------

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from taskrunner.cli.supervisor import parent_watch

    async def main() -> None:
        calls = []
        gone = asyncio.Event()
        def on_gone(signum: int) -> None:
            calls.append((int(signum), os.getppid() == int(sys.argv[1])))
            gone.set()
        with parent_watch(int(sys.argv[1]), on_gone):
            print("ready", flush=True)
            await asyncio.wait_for(gone.wait(), 20)
            os.kill(os.getpid(), signal.SIGHUP)  # as a later re-parenting would
            for _ in range(20):
                await asyncio.sleep(0)
        print("calls", calls, flush=True)

    asyncio.run(main())
    """
)

# A parent with a second thread alive: the kernel re-parents the child to that thread
# first, then to init, signalling it at each step.
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, threading
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid())])
    print(child.pid, flush=True)
    child.wait()
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux only")
def test_a_child_is_told_once_when_its_sigkilled_parent_is_gone(tmp_path: Path) -> None:
    out = tmp_path / "child.out"
    with out.open("w") as child_out:
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, CHILD],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=child_out,
            text=True,
        )
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    # The child's stdout is the parent's pipe: "ready" comes through it.
    assert parent.stdout.readline() == "ready\n"

    parent.kill()
    parent.wait(timeout=DEADLINE_SECONDS)

    with parent.stdout:
        rest = parent.stdout.read()  # EOF once the child exited too
    # Once, and only once the parent was gone (never while it lived).
    assert rest == f"calls [({int(signal.SIGHUP)}, False)]\n", out.read_text()
    assert child_pid != parent.pid
