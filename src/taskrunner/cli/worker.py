"""``taskrunner worker``: run the tasks of an App until a signal (or, in burst mode, empty)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from taskrunner.app import App
from taskrunner.backends import connect, outbox_relay
from taskrunner.cli import supervisor
from taskrunner.cli.app import load_app
from taskrunner.cli.common import (
    EXIT_OK,
    Parser,
    UsageError,
    app_options,
    common_options,
    is_memory,
    runner_options,
    signal_handlers,
)
from taskrunner.errors import ConfigurationError
from taskrunner.queue import Queue
from taskrunner.redaction import mask_url
from taskrunner.runner import Runner
from taskrunner.settings import Settings

__all__ = ["FORCE_STOP_GRACE_SECONDS", "add_parser", "run_worker"]

_log = logging.getLogger("taskrunner.cli")

# After the signal that should end the worker (the second without threads running,
# else the third), how long the runner may take to return before the command cancels
# it outright (seconds).
FORCE_STOP_GRACE_SECONDS = 5.0


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add the ``worker`` command."""
    worker = commands.add_parser(
        "worker",
        parents=[common_options(output=False)],
        help="run a worker process until SIGTERM/SIGINT (or, with --burst, until empty)",
        description="Run the tasks of an App. SIGTERM or SIGINT stops fetching and lets "
        "running tasks finish (up to --drain-timeout-seconds); a second signal cancels "
        "async tasks at once and releases their messages, and keeps waiting for plain "
        "def tasks (threads cannot be interrupted; their leases are kept); a third exits "
        "at once, leaving those messages leased until their leases lapse. Exit 0. "
        "With --processes N, a supervisor runs N such workers, forwards every signal "
        "to each, and restarts any that dies.",
    )
    app_options(worker)
    worker.add_argument("--burst", action="store_true", help="stop once the queue is empty")
    supervisor.add_arguments(worker)
    runner_options(worker)


async def run_worker(args: argparse.Namespace, settings: Settings) -> int:
    """Run the worker until stopped; 0 after a signal or an empty queue in burst mode.

    Signals: the first stops fetching and drains; the second cancels the running
    ``async def`` tasks (their messages are released) and keeps waiting, with their
    leases heartbeated, for plain ``def`` tasks, whose threads cannot be interrupted;
    the third exits at once, leaving those messages leased until their leases lapse.

    With ``--processes N`` (N > 1) this process runs no tasks: it supervises N such
    workers (`taskrunner.cli.supervisor`) and returns their verdict (0 when all
    exited 0, 1 when one failed, 2 when one reported a configuration error).
    """
    if settings.app is None:
        raise UsageError(
            "worker needs the App to run: taskrunner worker MODULE:APP (or --app "
            "MODULE:APP, or set 'app' in the config file or TASKRUNNER_APP)"
        )
    processes: supervisor.Processes = args.processes
    supervisor.check_processes(processes, settings)
    # Loaded here even by a supervisor: a bad App is reported once, not by N children.
    app = load_app(settings.app, where=settings.source_of("app"))
    if processes.count > 1:
        return await supervisor.supervise(args, settings, processes.count)
    process = _WorkerProcess(settings.runner.drain_timeout_seconds)
    with (
        signal_handlers(process.on_signal),
        supervisor.parent_watch(args.supervised_by, process.on_signal),
    ):
        try:
            await process.serve(app, settings, burst=args.burst)
        except asyncio.CancelledError:
            if not process.signals:
                raise
            # A signal before the runner existed, or the forced stop after a second.
    if process.runner is not None and process.runner.threads_running:
        # Only after the third signal: threads the runner left behind. Python would
        # wait for them at exit (silently, for as long as they run); exit instead. The
        # threads end with the process, so their leased messages cannot run twice.
        _exit_now(EXIT_OK)
    return EXIT_OK


def _exit_now(code: int) -> NoReturn:
    logging.shutdown()  # flushes every handler
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


class _WorkerProcess:
    """The worker command's state: its runner (once built) and the signals seen."""

    def __init__(self, drain_timeout_seconds: float) -> None:
        self.runner: Runner | None = None
        self.signals = 0
        self._drain = drain_timeout_seconds
        self._task = asyncio.current_task()

    def on_signal(self, signum: int) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        runner = self.runner
        if runner is None:
            _log.warning("%s received before the worker started; exiting", name)
            if self._task is not None:
                self._task.cancel()
            return
        threads = runner.threads_running
        listed = f"{len(threads)} thread task(s)"
        if threads:
            listed += f" {'to return' if self.signals == 2 else 'still running'}: "
            listed += ", ".join(threads)
        if self.signals == 1:
            _log.warning(
                "%s received: stopping; running tasks get up to %gs to finish "
                "(send it again to stop now)",
                name,
                self._drain,
            )
            runner.stop()
        elif self.signals == 2:
            if threads:
                _log.warning(
                    "%s received again: cancelling running async tasks and releasing their "
                    "messages; waiting for %s; their leases are kept; send another signal "
                    "to exit now",
                    name,
                    listed,
                )
            else:
                _log.warning(
                    "%s received again: cancelling running tasks and releasing their messages",
                    name,
                )
                self._force_later()
            runner.skip_drain()
        elif self.signals == 3:
            if threads:
                _log.warning(
                    "%s received a third time: exiting now, with %s; their messages stay "
                    "leased and are redelivered once their leases lapse (safe: the threads "
                    "end with this process)",
                    name,
                    listed,
                )
            else:
                _log.warning("%s received a third time: stopping now", name)
            runner.stop()
            self._force_later()
        else:
            self._force()

    def _force_later(self) -> None:
        asyncio.get_running_loop().call_later(FORCE_STOP_GRACE_SECONDS, self._force)

    def _force(self) -> None:
        # The runner should be gone by now. If a loop inside it missed its cancellation
        # (Python 3.11's asyncio.wait_for can swallow one in client libraries),
        # cancelling the command's task cancels every loop of its TaskGroup once more:
        # the promise "a further signal stops fast" must not depend on every library.
        if self._task is not None and not self._task.done():
            _log.warning(
                "the worker did not stop within %gs of the signal; cancelling it",
                FORCE_STOP_GRACE_SECONDS,
            )
            self._task.cancel()

    async def serve(self, app: App, settings: Settings, *, burst: bool) -> None:
        url = settings.url
        queue = await connect(url, app.queue)
        try:
            if is_memory(url):
                _log.warning(
                    "backend memory:// lives in this process: no other process can enqueue "
                    "to this worker; use a shared backend such as redis://"
                )
            runner = Runner(queue, app, settings.runner)
            close_metrics = await _start_metrics(runner, settings)
            _log.info(
                "worker for %s: queue %r on %s%s",
                settings.app,
                app.queue,
                mask_url(url),
                " (burst: stops when the queue is empty)" if burst else "",
            )
            self.runner = runner
            try:
                if settings.outbox_url is None:
                    await runner.run(burst=burst)
                else:
                    await _run_with_relay(runner, queue, app, settings.outbox_url, burst=burst)
            finally:
                if close_metrics is not None:
                    close_metrics()
        finally:
            await queue.aclose()


async def _run_with_relay(
    runner: Runner, queue: Queue, app: App, outbox_url: str, *, burst: bool
) -> None:
    """Run the runner and, beside it, the outbox relay; the relay stops with the runner."""
    relay = outbox_relay(outbox_url, queue, app.queue)
    _log.info("relaying the outbox at %s into queue %r", mask_url(outbox_url), app.queue)
    async with asyncio.TaskGroup() as group:
        relaying = group.create_task(relay.run(), name="outbox relay")
        try:
            await runner.run(burst=burst)
        finally:
            relaying.cancel()


async def _start_metrics(runner: Runner, settings: Settings) -> Callable[[], None] | None:
    """Start the Prometheus exporter when ``metrics_port`` is set; returns its closer."""
    port = settings.metrics_port
    if port is None:
        return None
    from taskrunner.metrics import start_metrics_server

    try:
        server = start_metrics_server(runner, port, addr=settings.metrics_addr)
    except OSError as exc:
        raise ConfigurationError(
            f"metrics_port={port} (from {settings.source_of('metrics_port')}): cannot listen "
            f"on {settings.metrics_addr}:{port}: {exc.strerror or exc}",
            setting="metrics_port",
        ) from None
    _log.info("metrics on http://%s:%d/metrics", settings.metrics_addr, server.port)
    return server.close
