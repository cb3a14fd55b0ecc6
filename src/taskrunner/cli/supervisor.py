"""``taskrunner worker --processes N``: one supervisor keeping N worker processes running.

A runner uses one core: its ``async def`` tasks share one event loop and its plain
``def`` tasks share one interpreter lock. To use every core, the supervisor starts N
copies of the same worker command (``python -m taskrunner worker ...`` without
``--processes``; same arguments, config file, environment and directory), each a
complete worker with its own consumer names (they include the pid). It

* restarts a child that dies unexpectedly (non-zero exit, or killed by a signal), after
  a backoff of 0.5 s doubling up to 30 s, reset once a child stayed up 60 s;
* does not restart a child that exits 0 on its own (``--burst`` found the queue
  empty); once every child has exited, the supervisor exits too;
* forwards SIGTERM/SIGINT to every child, every time it receives one, so the children
  drain on the first and escalate on the next ones exactly as a single worker does;
  then waits for all of them: exit 0 when all exited 0, 1 otherwise (the log says
  which child failed), 2 when a child reported a configuration error (restarting
  would only repeat it);
* cannot leave orphans: each child asks the kernel for SIGTERM when the supervisor
  dies (see `parent_watch`), so even a SIGKILLed supervisor's children drain.

Internal module of the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from taskrunner.cli.common import (
    EXIT_BACKEND,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    is_memory,
    signal_handlers,
)
from taskrunner.clock import Clock, SystemClock, wait_event
from taskrunner.settings import Settings, flag_name

__all__ = [
    "Backoff",
    "ChildProcess",
    "Processes",
    "Spawn",
    "Supervisor",
    "add_arguments",
    "available_cpus",
    "check_processes",
    "child_argv",
    "describe_exit",
    "parent_watch",
    "parse_processes",
    "supervise",
]

_log = logging.getLogger("taskrunner.cli")

PROCESSES_FLAG = "--processes"
# Hidden: how the supervisor tells a child whose death it must outlive.
SUPERVISED_BY_FLAG = "--supervised-by"


@dataclass(frozen=True, slots=True)
class Processes:
    """The value of ``--processes``: how many worker processes, and whether it was ``auto``."""

    count: int
    auto: bool = False


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def parse_processes(text: str) -> Processes:
    """``--processes``: an integer >= 1 or ``auto`` (the usable CPUs); an argparse ``type``."""
    if text.strip().lower() == "auto":
        return Processes(available_cpus(), auto=True)
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither an integer nor 'auto'") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1 (or 'auto')")
    return Processes(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--processes`` (and the hidden flag a supervisor gives its children)."""
    parser.add_argument(
        PROCESSES_FLAG,
        type=parse_processes,
        default=Processes(1),
        metavar="N|auto",
        help="run N worker processes under a supervisor that restarts any that dies "
        "(auto: one per usable CPU; default 1: this process is the worker). Plain def "
        "tasks and CPU-bound work scale with processes, not with --num-workers",
    )
    parser.add_argument(SUPERVISED_BY_FLAG, type=int, metavar="PID", help=argparse.SUPPRESS)


def check_processes(processes: Processes, settings: Settings) -> None:
    """Refuse a process count the configuration cannot honour.

    Raises:
        UsageError: More than one process (or ``auto``) on ``memory://``, whose messages
            live in one process; or metrics ports beyond 65535.
    """
    if processes.count == 1 and not processes.auto:
        return
    given = "auto" if processes.auto else str(processes.count)
    if is_memory(settings.url):
        raise UsageError(
            f"{PROCESSES_FLAG} {given}: backend memory:// lives in one process, so other "
            "worker processes would see none of its messages; use a shared backend such "
            "as redis:// (or drop --processes)"
        )
    port = settings.metrics_port
    if port is not None and port + processes.count - 1 > 65535:
        raise UsageError(
            f"{PROCESSES_FLAG} {given}: child i serves metrics on metrics_port + i, and "
            f"{port} + {processes.count - 1} is beyond port 65535"
        )


# Namespace entries of the worker command that are not passed on to a child as given.
_NOT_PASSED = {"command", "output", "processes", "supervised_by", "app_argument", "config", "burst"}


def child_argv(
    args: argparse.Namespace, *, parent: int, metrics_port: int | None = None
) -> list[str]:
    """The words after ``python -m taskrunner`` for one child of a supervisor.

    The same worker command without ``--processes``: the App, ``--config``, every
    setting flag given, ``--burst``; plus the supervisor's pid (`parent_watch`), and
    the child's own metrics port when metrics are on (ports cannot be shared).
    Settings from the config file and the environment reach the child by itself,
    which reads the same file and inherits the environment.

    Raises:
        RuntimeError: `args` holds an option this function does not know, so a new
            worker flag can never be dropped silently on the way to the children.
    """
    words = ["worker"]
    app: str | None = getattr(args, "app_argument", None)
    if app is not None:
        words.append(app)
    config: str | None = getattr(args, "config", None)
    if config is not None:
        words.append(f"--config={config}")
    for name, value in vars(args).items():
        if name in _NOT_PASSED:
            continue
        key = name.removeprefix("setting:")
        if key == name:
            raise RuntimeError(f"the supervisor does not know how to pass {name!r} to a child")
        if key == "metrics_port" and metrics_port is not None:
            continue
        # --flag=value: a value starting with "-" is not taken for another flag.
        words.append(f"{flag_name(key)}={value}")
    if metrics_port is not None:
        words.append(f"{flag_name('metrics_port')}={metrics_port}")
    if getattr(args, "burst", False):
        words.append("--burst")
    words.append(f"{SUPERVISED_BY_FLAG}={parent}")
    return words


# prctl(2) option: the signal this process gets when its parent thread exits.
_PR_SET_PDEATHSIG = 1
_PARENT_POLL_SECONDS = 1.0
# The signal that says "the supervisor may be gone". Not SIGTERM: the kernel sends it
# each time this process is re-parented (see parent_watch), and a worker takes a
# second SIGTERM as "stop now".
_PARENT_GONE_SIGNAL = signal.SIGHUP


@contextlib.contextmanager
def parent_watch(parent: int | None, on_gone: Callable[[int], None]) -> Iterator[None]:
    """While the block runs, call ``on_gone(SIGHUP)`` once if the supervisor `parent` dies.

    No-op when `parent` is None (not a supervised child). The worker passes its signal
    callback, so a child whose supervisor was SIGKILLed drains as on a first SIGTERM.

    On Linux the kernel signals the death (``prctl(PR_SET_PDEATHSIG)``): it works when
    the supervisor is SIGKILLed, costs nothing while waiting and cannot miss it. It
    fires whenever the *thread* that forked this process exits, and again at each
    re-parenting (to another thread of the supervisor, such as asyncio's child
    watcher, then to init or a subreaper), so the signal alone means nothing: the
    handler acts once, and only when the parent pid is no longer `parent`. A
    supervisor that died before the ``prctl`` is caught by checking the parent pid
    right after it. Elsewhere a daemon thread compares the parent pid once a second:
    polling, but the only portable way to notice a parent's death.
    """
    if parent is None:
        yield
        return
    loop = asyncio.get_running_loop()
    fired = False

    def check() -> None:
        nonlocal fired
        if fired or os.getppid() == parent:
            return
        fired = True
        _log.warning("the supervisor (pid %d) is gone: stopping", parent)
        on_gone(_PARENT_GONE_SIGNAL)

    loop.add_signal_handler(_PARENT_GONE_SIGNAL, check)
    try:
        if not _kernel_watch():
            threading.Thread(
                target=_poll_parent, args=(parent,), name="taskrunner-parent-watch", daemon=True
            ).start()
        check()  # the supervisor may have died before the kernel was asked to tell
        yield
    finally:
        loop.remove_signal_handler(_PARENT_GONE_SIGNAL)


def _kernel_watch() -> bool:
    """Ask Linux for `_PARENT_GONE_SIGNAL` when the parent dies; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, int(_PARENT_GONE_SIGNAL), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _poll_parent(parent: int) -> None:
    stop = threading.Event()  # never set: its wait is a sleep that needs no loop
    while os.getppid() == parent:
        stop.wait(_PARENT_POLL_SECONDS)
    os.kill(os.getpid(), _PARENT_GONE_SIGNAL)


class ChildProcess(Protocol):
    """What the supervisor needs of a child (`asyncio.subprocess.Process` has it)."""

    @property
    def pid(self) -> int:
        """The child's process id."""
        ...

    @property
    def returncode(self) -> int | None:
        """The exit code, minus the signal number if a signal killed it; None while it runs."""
        ...

    async def wait(self) -> int:
        """Wait for the exit; returns `returncode`."""
        ...

    def send_signal(self, signum: int, /) -> None:
        """Send signal `signum` to the child."""
        ...


#: Starts child number `index` (0-based); raises OSError when it cannot.
Spawn = Callable[[int], Awaitable[ChildProcess]]


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long the supervisor waits before restarting a child that died.

    Attributes:
        first_seconds: The wait after a first death.
        max_seconds: The longest wait; each further death in a row doubles it up to this.
        reset_after_seconds: A child that stayed up this long counts as healthy: its
            next death waits `first_seconds` again.
    """

    first_seconds: float = 0.5
    max_seconds: float = 30.0
    reset_after_seconds: float = 60.0

    def delay(self, deaths: int) -> float:
        """The wait before the restart that follows `deaths` deaths in a row (>= 1)."""
        # The exponent is capped: 2 ** 10_000 cannot be a float.
        return min(self.max_seconds, self.first_seconds * 2.0 ** min(max(deaths, 1) - 1, 64))


def describe_exit(code: int | None) -> str:
    """A child's exit status in words: ``exit code 3``, ``killed by SIGKILL``."""
    if code is None:
        return "could not be started"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass
class _Slot:
    """One of the N places a child runs in, across its restarts."""

    index: int
    child: ChildProcess | None = None
    pid: int | None = None
    code: int | None = None


class Supervisor:
    """Keeps `processes` children running until a signal, or until all exit 0.

    Args:
        processes: How many children run at once (>= 1).
        spawn: Starts child number i.
        clock: What the restart backoff waits on.
        backoff: The restart schedule.
    """

    def __init__(
        self,
        processes: int,
        spawn: Spawn,
        *,
        clock: Clock | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes={processes} must be >= 1")
        self._slots = [_Slot(i) for i in range(processes)]
        self._spawn = spawn
        self._clock: Clock = clock or SystemClock()
        self._backoff = backoff or Backoff()
        self._stopping = asyncio.Event()
        self._forwarded: list[int] = []
        self._fatal: _Slot | None = None

    @property
    def pids(self) -> list[int | None]:
        """The pid of each slot's running child (None while none runs)."""
        return [slot.child.pid if slot.child is not None else None for slot in self._slots]

    async def run(self) -> int:
        """Run until every child has exited; returns the command's exit code.

        0 when every child's last exit was 0 (or it was stopped by a forwarded signal
        before it could install its handlers); 2 when a child exited 2 (a
        configuration error: the others were stopped); 1 otherwise.
        """
        async with asyncio.TaskGroup() as group:
            for slot in self._slots:
                group.create_task(self._keep(slot))
        return self._verdict()

    def on_signal(self, signum: int) -> None:
        """Forward `signum` to every running child and stop restarting them."""
        name = signal.Signals(signum).name
        running = self._running()
        if not self._forwarded:
            _log.warning(
                "%s received: forwarding it to %d worker process(es) (%s); they stop "
                "fetching and drain; send it again to make them stop sooner",
                name,
                len(running),
                _pids(running),
            )
        else:
            _log.warning(
                "%s received again: forwarding it to %d worker process(es) (%s)",
                name,
                len(running),
                _pids(running),
            )
        self._stop(signum, running)

    def _stop(self, signum: int, running: list[_Slot]) -> None:
        self._forwarded.append(signum)
        self._stopping.set()
        for slot in running:
            assert slot.child is not None
            with contextlib.suppress(ProcessLookupError):
                slot.child.send_signal(signum)

    def _running(self) -> list[_Slot]:
        return [s for s in self._slots if s.child is not None and s.child.returncode is None]

    async def _keep(self, slot: _Slot) -> None:
        deaths = 0
        while not self._stopping.is_set():
            started = self._clock.monotonic()
            try:
                child = await self._spawn(slot.index)
            except OSError as exc:
                slot.code = slot.pid = None
                _log.error("worker process %d could not be started: %s", slot.index, exc)
            else:
                slot.child, slot.pid = child, child.pid
                if self._forwarded:
                    # The signal came while this child was being started: it missed it.
                    with contextlib.suppress(ProcessLookupError):
                        child.send_signal(self._forwarded[-1])
                _log.info("worker process %d started: pid %d", slot.index, child.pid)
                slot.code = await child.wait()
                slot.child = None
                if self._stopping.is_set():
                    _log.info(
                        "worker process %d (pid %d) exited: %s",
                        slot.index,
                        child.pid,
                        describe_exit(slot.code),
                    )
                    return
                if slot.code == EXIT_OK:
                    _log.info(
                        "worker process %d (pid %d) exited 0 on its own (--burst: the queue "
                        "is empty); not restarted",
                        slot.index,
                        child.pid,
                    )
                    return
                if slot.code == EXIT_USAGE:
                    _log.error(
                        "worker process %d (pid %d) exited 2: a usage or configuration "
                        "error (see above), which a restart would repeat; stopping the others",
                        slot.index,
                        child.pid,
                    )
                    self._fatal = slot
                    self._stop(signal.SIGTERM, self._running())
                    return
            up = self._clock.monotonic() - started
            deaths = 1 if up >= self._backoff.reset_after_seconds else deaths + 1
            delay = self._backoff.delay(deaths)
            _log.warning(
                "worker process %d%s died: %s after %.1fs; restarting it in %gs",
                slot.index,
                "" if slot.pid is None else f" (pid {slot.pid})",
                describe_exit(slot.code),
                up,
                delay,
            )
            if await wait_event(self._clock, self._stopping, delay):
                return
            _log.warning("restarting worker process %d (death %d in a row)", slot.index, deaths)

    def _clean(self, code: int | None) -> bool:
        if code == EXIT_OK:
            return True
        # A child that got the forwarded signal before its handlers were installed
        # (still importing) dies of it, or exits 130 on SIGINT: it had not started
        # any task, so the stop was clean.
        return code is not None and any(
            code == -signum or (signum == signal.SIGINT and code == EXIT_INTERRUPTED)
            for signum in self._forwarded
        )

    def _verdict(self) -> int:
        if self._fatal is not None:
            return EXIT_USAGE
        failed = [slot for slot in self._slots if not self._clean(slot.code)]
        for slot in failed:
            _log.error(
                "worker process %d%s failed: %s",
                slot.index,
                "" if slot.pid is None else f" (pid {slot.pid})",
                describe_exit(slot.code),
            )
        if failed:
            return EXIT_BACKEND
        _log.info("all %d worker processes exited cleanly", len(self._slots))
        return EXIT_OK


def _pids(slots: Sequence[_Slot]) -> str:
    return "pids " + ", ".join(str(s.pid) for s in slots) if slots else "none running"


async def supervise(args: argparse.Namespace, settings: Settings, processes: int) -> int:
    """Run `processes` copies of the worker command of `args` until they are done.

    Signals (SIGTERM, SIGINT) are forwarded to every child each time; see the module
    docstring for restarts and the exit code.
    """
    parent = os.getpid()
    base = settings.metrics_port

    async def spawn(index: int) -> ChildProcess:
        port = None if base is None else base + index
        words = child_argv(args, parent=parent, metrics_port=port)
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "taskrunner",
            *words,
            stdin=asyncio.subprocess.DEVNULL,
            # Their own process group: a Ctrl-C in a terminal signals the whole
            # foreground group, and a child would get SIGINT twice (from the terminal
            # and forwarded), skipping its drain. Only the supervisor is signalled.
            process_group=0,
        )

    supervisor = Supervisor(processes, spawn)
    _log.info(
        "supervisor (pid %d): running %d worker processes of %s",
        parent,
        processes,
        settings.app,
    )
    with signal_handlers(supervisor.on_signal):
        return await supervisor.run()
