"""The worker: fetchers, a worker pool, a lease keeper, a reclaimer and an acker.

Example::

    async with taskrunner.open_queue("redis://localhost:6379/0", app.queue) as queue:
        runner = taskrunner.Runner(queue, app, taskrunner.RunnerConfig(num_workers=50))
        await runner.run()            # until runner.stop(); burst=True: until empty

Structure: one `asyncio.TaskGroup` owns every loop and every running task, so nothing
outlives `Runner.run` and an unexpected error anywhere is never silently dropped.

Shutdown (`Runner.stop`, or the CLI on SIGTERM/SIGINT): stop fetching (receives in
progress are awaited, or cancelled where the backend says that is safe; what they
return is run like the rest), let running tasks finish for up to
``drain_timeout_seconds``, then cancel the ``async def`` ones still running, which
release their messages for immediate redelivery. Plain ``def`` tasks cannot be
interrupted: shutdown waits for their threads, heartbeating their leases, unless
`stop` is called again, which leaves them leased to lapse (never released while the
thread still runs). A task whose code has returned is never cancelled either: its ack
(or release, or dead-letter) is still on its way, waiting out a backend outage if it
must, with its lease heartbeated. `Runner.skip_drain` cancels the running async tasks at
once but still waits for the threads and for those calls. Nothing is lost: every
message is acked, released, or left leased to lapse and be reclaimed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from typing import Any

from taskrunner.acker import Acker
from taskrunner.app import App
from taskrunner.attempt_log import AttemptLogger
from taskrunner.attempts import BuiltinObserver, combine
from taskrunner.clock import Clock, SystemClock, wait_event
from taskrunner.codec import decode_envelope
from taskrunner.config import RunnerConfig
from taskrunner.errors import BackendError, DecodeError, UnsupportedFeatureError
from taskrunner.executor import Executor
from taskrunner.fetcher import Fetcher
from taskrunner.heartbeat import LeaseKeeper
from taskrunner.histograms import Histograms
from taskrunner.leases import Lease, LeaseTable, adopt
from taskrunner.logs import log_fields
from taskrunner.monitor import Monitor
from taskrunner.pool import WorkerPool
from taskrunner.queue import Delivery, Queue, leadership_of, results_of
from taskrunner.reclaimer import Reclaimer
from taskrunner.reconnect import ReconnectGate
from taskrunner.scheduler import Scheduler
from taskrunner.stats import RunnerStats, StatsRecorder
from taskrunner.tracing import tracing_observer
from taskrunner.tuning import Autoscaler

__all__ = ["Runner"]

_log = logging.getLogger("taskrunner.runner")

# In burst mode: how long a receive waits, and how often the queue is checked for
# emptiness. Short, so the run ends soon after the last message.
_BURST_POLL_SECONDS = 0.1

# A consumer holding no message and idle this long (or ten leases, if longer) is
# forgotten by the backend; live fetchers touch theirs every receive.
_CONSUMER_IDLE_SECONDS = 3600.0


class Runner:
    """Runs the tasks of `app` from `queue` until stopped.

    Guarantees:

    * A fetcher never leases more messages than the pool can start at once.
    * While a task runs, its lease is heartbeated (when the queue requires it); a
      lease reported lost is never acked afterwards, and the loss is logged and
      counted in `stats`.
    * Each message is acked, retried (released with backoff), handed to the
      failed-task handler once, or dead-lettered with a reason; none is dropped.
    * `run` returns only after every task it started has finished or been cancelled
      and its message acked or released.
    * When the app has periodic schedules and the backend offers ``leadership``, the
      runner campaigns for the queue's scheduler leadership and, while it leads,
      fires each due instant (exactly once across all runners; see
      docs/scheduling.md). Not in burst mode. `stop` resigns the leadership first.

    Args:
        queue: The backend to consume.
        app: The tasks to run.
        config: Settings; defaults to `RunnerConfig()`.
        clock: Time source for every loop; tests pass a `FakeClock`.
    """

    def __init__(
        self,
        queue: Queue,
        app: App,
        config: RunnerConfig | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.config = config or RunnerConfig()
        self._queue = queue
        self._app = app
        self._clock = clock or SystemClock()
        prefix = self.config.consumer_prefix or f"{app.queue}:{socket.gethostname()}"
        # pid + random suffix: a restarted process never inherits a dead one's leases.
        self._incarnation = f"{prefix}:{os.getpid()}-{secrets.token_hex(3)}"
        # Only registered names become metric labels: a task name is data from the wire.
        self._stats = StatsRecorder(known_task=app.tasks.__contains__)
        self._pool = WorkerPool(self.config.initial_workers)
        self._leases = LeaseTable()
        # After a backend failure, leases are heartbeated before new work is taken.
        self._gate = ReconnectGate() if queue.requires_heartbeat else None
        results = results_of(queue)
        self._acker = Acker(queue, clock=self._clock, gate=self._gate, results=results)
        self._threads: ThreadPoolExecutor | None = None
        self.histograms = Histograms(app.queue, known_task=app.tasks.__contains__)
        # The tracer wraps the others: its span is current while they are told.
        builtin = BuiltinObserver(self.histograms, AttemptLogger(), tracing_observer(app.queue))
        observer = combine((builtin, *self.config.observers))
        self._executor = Executor(
            queue,
            app,
            self.config,
            clock=self._clock,
            acker=self._acker,
            stats=self._stats,
            threads=self._thread_pool,
            observer=observer,
            results=results,
        )
        self._stop_requested = asyncio.Event()
        self._force = asyncio.Event()
        self._drain_skipped = False
        # Leases whose thread was still running when a forced stop left it.
        self._left: list[Lease] = []
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        # Each lease being carried and its worker task (keyed by the lease, so a
        # finishing worker finds its entry without asking asyncio for the current task).
        self._running: dict[Lease, asyncio.Task[None]] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._started = False
        self.fetchers: list[Fetcher] = []
        self.scheduler = self._make_scheduler()
        tuning = self.config.tuning
        self.autoscaler = (
            None if tuning is None else Autoscaler(self._pool, tuning, clock=self._clock)
        )
        self.monitor = Monitor(
            queue,
            self._pool,
            self._stats,
            instance=self._incarnation,
            clock=self._clock,
            interval_seconds=self.config.monitor_interval_seconds,
            spawn=self._spawn,
            autoscaler=self.autoscaler,
            threshold_seconds=self.config.long_queue_threshold_seconds,
            hook=self.config.long_queue_hook,
            consumer_idle_seconds=max(_CONSUMER_IDLE_SECONDS, 10 * self.config.lease_seconds),
        )

    @property
    def consumer_names(self) -> list[str]:
        """Consumer names of the fetchers and the reclaimer, unique to this run."""
        return [f"{self._incarnation}:f{i}" for i in range(self.config.num_fetchers)] + [
            f"{self._incarnation}:r"
        ]

    @property
    def queue_name(self) -> str:
        """Name of the queue this runner consumes."""
        return self._app.queue

    @property
    def pool(self) -> WorkerPool:
        """The worker pool (tuning mode resizes it)."""
        return self._pool

    async def wait_ready(self) -> None:
        """Wait until every loop of `run` has started."""
        await self._ready.wait()

    def stop(self) -> None:
        """Ask `run` to shut down gracefully; a second call skips the drain.

        The second call also stops waiting for plain ``def`` tasks whose threads still
        run; their messages stay leased and are reclaimed after the lease.
        """
        if self._stop_requested.is_set():
            self._force.set()
            self._idle.set()
        self._stop_requested.set()

    def skip_drain(self) -> None:
        """Stop without the drain, but still wait for plain ``def`` tasks.

        Running ``async def`` tasks are cancelled at once and their messages released;
        threads of plain ``def`` tasks cannot be interrupted, so `run` keeps waiting for
        them, heartbeating their leases, and for the acks of tasks that already
        returned. A later `stop` leaves them (as a second `stop` does). The command
        line's second signal calls this, its third `stop`.
        """
        self._drain_skipped = True
        self._stop_requested.set()
        self._idle.set()  # ends a drain in progress

    @property
    def threads_running(self) -> list[str]:
        """Task names of plain ``def`` tasks whose threads still run, this run's or left.

        After `run` returned from a forced stop, the threads it left behind: their
        messages stay leased until the leases lapse, so the process should exit soon.
        """
        leases = [*self._running, *self._left]
        return [_task_name(lease) for lease in leases if _thread_running(lease)]

    def stats(self) -> RunnerStats:
        """Counters and pool figures of this runner, with the last queue observation."""
        seen = self.monitor.latest
        return self._stats.snapshot(
            in_flight=len(self._leases),
            workers=self._pool.capacity,
            busy=self._pool.busy,
            backlog=None if seen is None else seen.backlog,
            cluster_workers=None if seen is None else seen.workers,
            processes=None if seen is None else seen.processes,
            predicted_wait_seconds=None if seen is None else seen.predicted_wait_seconds,
        )

    async def run(self, *, burst: bool = False) -> None:
        """Process messages until `stop` is called (or, with `burst`, the queue is empty).

        Raises:
            RuntimeError: The runner was already run; create a new one.
        """
        if self._started:
            raise RuntimeError("a Runner runs once; create a new Runner to run again")
        self._started = True
        self._check_flow_control()
        config = self.config
        wait_seconds = (
            min(config.block_seconds, _BURST_POLL_SECONDS) if burst else config.block_seconds
        )
        cooldown = None if config.tuning is None else config.tuning.cooldown_seconds
        names = self.consumer_names
        self.fetchers = [
            Fetcher(
                self._queue,
                self._pool,
                consumer=names[i],
                hand_over=self._received,
                batch_size=config.batch_size,
                wait_seconds=wait_seconds,
                lease_seconds=config.lease_seconds,
                clock=self._clock,
                stopping=self._stop_requested,
                cooldown_seconds=cooldown,
                gate=self._gate,
            )
            for i in range(config.num_fetchers)
        ]
        heartbeats = self._queue.requires_heartbeat
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                acker = tg.create_task(self._acker.run(), name="taskrunner:acker")
                background = [tg.create_task(self.monitor.run(), name="taskrunner:monitor")]
                reclaimer: asyncio.Task[None] | None = None
                if heartbeats:
                    background.append(
                        tg.create_task(self._lease_keeper().run(), name="taskrunner:heartbeat")
                    )
                    reclaimer = tg.create_task(
                        self._reclaimer(names[-1]).run(), name="taskrunner:reclaimer"
                    )
                fetchers = [
                    tg.create_task(f.run(), name=f"taskrunner:fetcher:{i}")
                    for i, f in enumerate(self.fetchers)
                ]
                if burst:
                    background.append(tg.create_task(self._watch_burst(), name="taskrunner:burst"))
                scheduling: asyncio.Task[None] | None = None
                if self.scheduler is not None and not burst:
                    scheduling = tg.create_task(self.scheduler.run(), name="taskrunner:schedules")
                self._ready.set()
                _log.info(
                    "worker started: queue %r, %d fetcher(s), %d worker(s), consumers %s",
                    self._app.queue,
                    config.num_fetchers,
                    self._pool.capacity,
                    self._incarnation,
                )
                await self._stop_requested.wait()
                if self.scheduler is not None:
                    # First, so another worker takes the leadership while this drains.
                    self.scheduler.stop()
                await self._shut_down(fetchers, reclaimer)
                if scheduling is not None:
                    await scheduling
                self._acker.close()
                await acker
                for task in background:
                    task.cancel()
                await self._forget_consumers()
        finally:
            if self._threads is not None:
                self._threads.shutdown(wait=False, cancel_futures=True)
            log_fields(_log, logging.INFO, "worker stopped", _stop_fields(self.stats()))

    def _check_flow_control(self) -> None:
        """Refuse to start when a task's limits would not hold on this backend."""
        limited = sorted(t.name for t in self._app.tasks.values() if t.flow.active)
        if limited and not self._queue.capabilities.flow_control:
            backend = type(self._queue).__name__
            raise UnsupportedFeatureError(
                f"task(s) {', '.join(map(repr, limited))} declare a rate limit, concurrency "
                f"limit or fairness key, which needs a backend claiming the "
                f"'flow_control' capability; {backend} does not, so the worker did not "
                "start (docs/flow-control.md)",
                backend=backend,
                capability="flow_control",
            )

    def _make_scheduler(self) -> Scheduler | None:
        if not self._app.schedules:
            return None
        if leadership_of(self._queue) is None or not self._queue.capabilities.leadership:
            _log.warning(
                "the app has %d schedule(s), but %s offers no leadership: this worker "
                "does not fire them",
                len(self._app.schedules),
                type(self._queue).__name__,
            )
            return None
        return Scheduler(
            self._queue,
            self._app,
            holder=self._incarnation,
            ttl_seconds=self.config.leader_ttl_seconds,
            clock=self._clock,
        )

    async def _forget_consumers(self) -> None:
        # Consumer names are unique per run, so the backend would otherwise keep this
        # run's names until the idle clean-up of some later runner. Names still holding
        # a message (a thread left running by a forced stop) are kept by the backend.
        cleanup = self._queue.consumer_cleanup
        if cleanup is None:
            return
        try:
            await cleanup.remove_consumers(self.consumer_names)
        except BackendError as exc:
            _log.warning("could not remove this worker's consumer names: %s", exc)

    def _lease_keeper(self) -> LeaseKeeper:
        interval = self.config.heartbeat_interval_seconds
        assert interval is not None  # resolved when the config was built
        return LeaseKeeper(
            self._queue,
            self._leases,
            clock=self._clock,
            interval_seconds=interval,
            lease_seconds=self.config.lease_seconds,
            stats=self._stats,
            gate=self._gate,
        )

    def _reclaimer(self, consumer: str) -> Reclaimer:
        interval = self.config.reclaim_interval_seconds
        assert interval is not None  # resolved when the config was built
        return Reclaimer(
            self._queue,
            self._pool,
            consumer=consumer,
            hand_over=self._reclaimed,
            batch_size=self.config.batch_size,
            interval_seconds=interval,
            lease_seconds=self.config.lease_seconds,
            clock=self._clock,
            stopping=self._stop_requested,
            gate=self._gate,
        )

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        assert self._tg is not None
        return self._tg.create_task(coroutine)

    def _thread_pool(self) -> ThreadPoolExecutor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(
                max_workers=self.config.most_workers, thread_name_prefix="taskrunner-worker"
            )
        return self._threads

    def _received(self, deliveries: list[Delivery], reserved: int) -> None:
        self._stats.received += len(deliveries)
        self._start(deliveries, reserved)

    def _reclaimed(self, deliveries: list[Delivery], reserved: int) -> None:
        self._stats.reclaimed += len(deliveries)
        self._start(deliveries, reserved)

    def _start(self, deliveries: list[Delivery], reserved: int) -> None:
        # Deliveries a receive returns after shutdown began are started too: their
        # workers are reserved, and giving them back unstarted would still cost each a
        # delivery (the backend cannot tell a return from a crash).
        assert self._tg is not None
        now = self._clock.monotonic()
        started = 0
        leases = self._leases
        running = self._running
        create_task = self._tg.create_task
        for delivery in deliveries:
            held = leases.holding(delivery.message_id)
            if held is not None:
                adopt(held, delivery, now, self._stats)
                continue
            self._pool.start()
            started += 1
            lease = leases.add(delivery, now)
            running[lease] = create_task(self._run_one(lease))
        if started:
            self._idle.clear()
        self._pool.unreserve(reserved - started)

    async def _run_one(self, lease: Lease) -> None:
        try:
            await self._executor.execute(lease)
            if lease.thread is not None and not lease.thread.done():
                # A timed-out thread: its message is settled (no more heartbeats), but
                # its worker slot stays taken until the thread really returns.
                self._leases.remove(lease)
                await asyncio.wait({lease.thread})
        except Exception:
            # The executor settles every outcome itself; this is a bug. The message
            # comes back after its lease, and the other workers carry on.
            _log.exception("worker crashed; the message is redelivered after its lease")
        finally:
            self._leases.remove(lease)
            self._pool.finish()
            running = self._running
            running.pop(lease, None)
            if not running:
                self._idle.set()

    async def _shut_down(
        self, fetchers: list[asyncio.Task[None]], reclaimer: asyncio.Task[None] | None
    ) -> None:
        self._pool.close()
        cancel_safe = self._queue.capabilities.cancel_safe_receive
        for fetcher, task in zip(self.fetchers, fetchers, strict=True):
            if cancel_safe or not fetcher.receiving:
                task.cancel()
        waiting = [*fetchers, *([reclaimer] if reclaimer is not None else [])]
        await asyncio.wait(waiting)
        if self._running and not (self._force.is_set() or self._drain_skipped):
            _log.info(
                "draining %d running task(s) for up to %.1fs",
                len(self._running),
                self.config.drain_timeout_seconds,
            )
            await wait_event(self._clock, self._idle, self.config.drain_timeout_seconds)
        threads = {task: lease for lease, task in self._running.items() if _thread_running(lease)}
        # A task whose code returned and whose ack, release or dead-letter is on its way
        # (waiting out an outage, say) has nothing left to cut short; cancelling it
        # would drop that call and run the message again after its lease.
        settling = [
            task
            for lease, task in self._running.items()
            if lease.settling and task not in threads and not self._force.is_set()
        ]
        others = [
            task for task in self._running.values() if task not in threads and task not in settling
        ]
        if others:
            _log.warning("cancelling %d async task(s) still running", len(others))
            for task in others:
                task.cancel()
            await asyncio.wait(others)
        waits = [*threads, *settling]
        if waits and not self._force.is_set():
            # Neither can be interrupted; their leases stay heartbeated meanwhile.
            if threads:
                _log.warning(
                    "waiting for %d plain-def task(s) still running in threads to return: "
                    "%s; their leases are kept; stop again to leave them (their messages "
                    "are then redelivered after the lease)",
                    len(threads),
                    ", ".join(_task_name(lease) for lease in threads.values()),
                )
            if settling:
                _log.warning(
                    "waiting for %d ack(s), release(s) or dead-letter(s) of finished tasks "
                    "to reach the backend; their leases are kept; stop again to leave them "
                    "(their messages are then redelivered after the lease)",
                    len(settling),
                )
            finished = asyncio.ensure_future(asyncio.wait(waits))
            forced = asyncio.ensure_future(self._force.wait())
            try:
                await asyncio.wait({finished, forced}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                finished.cancel()
                forced.cancel()
        if self._running:
            self._left = [lease for lease in self._running if _thread_running(lease)]
            remaining = list(self._running.values())
            for task in remaining:
                task.cancel()
            await asyncio.wait(remaining)

    async def _watch_burst(self) -> None:
        while True:
            if not self._running:
                try:
                    if await self._queue.len() == 0:
                        _log.info("burst: queue is empty, stopping")
                        self.stop()
                        return
                except BackendError as exc:
                    _log.warning("burst: could not read the queue length: %s", exc)
            if await wait_event(self._clock, self._stop_requested, _BURST_POLL_SECONDS):
                return


def _thread_running(lease: Lease) -> bool:
    return lease.thread is not None and not lease.thread.done()


def _stop_fields(stats: RunnerStats) -> dict[str, object]:
    """The scalar statistics, for the structured "worker stopped" line."""
    return {f.name: getattr(stats, f.name) for f in fields(stats) if f.name != "tasks"}


def _task_name(lease: Lease) -> str:
    try:
        return decode_envelope(lease.delivery.body).task
    except DecodeError:  # pragma: no cover - a thread only runs a decoded task
        return "-"
