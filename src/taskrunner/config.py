"""The runner's knobs, validated when the config is built.

Every rule is checked in `RunnerConfig.__post_init__`; a value that breaks one raises
`ConfigurationError` naming the value and the rule. Defaults follow the design
(reference/fetchers-and-workers.md): a few fetchers, many workers, heartbeats well
inside the lease.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, fields
from typing import Any

from taskrunner.attempts import AttemptObserver
from taskrunner.errors import ConfigurationError
from taskrunner.failure import FailedTaskHandler

__all__ = ["LongQueueHook", "RunnerConfig", "TuningConfig"]

# More fetchers than this only adds receive contention (fetchers are I/O-bound).
MAX_FETCHERS = 64

LongQueueHook = Callable[[float], Awaitable[None] | None]
"""Called with the predicted wait in seconds when it crosses the threshold."""


@dataclass(frozen=True, kw_only=True)
class TuningConfig:
    """Tuning mode: the pool floats between `min_workers` and `max_workers`.

    The runner resizes the pool to keep the predicted wait (average task duration x
    backlog / workers serving the queue) within ``desired_wait_seconds ±
    wait_tolerance_seconds``, at most once per `cooldown_seconds` (0: no cooldown).

    Attributes:
        min_workers: Smallest pool size (>= 1).
        max_workers: Largest pool size (>= min_workers).
        desired_wait_seconds: Centre of the band (> 0).
        wait_tolerance_seconds: Half-width of the band (>= 0).
        cooldown_seconds: Least time between two resizes, and between two batch-size
            changes of one fetcher (>= 0; 0 means none).

    The controller decides after every observation (``monitor_interval_seconds``).
    """

    min_workers: int
    max_workers: int
    desired_wait_seconds: float
    wait_tolerance_seconds: float = 0.0
    cooldown_seconds: float = 10.0

    def __post_init__(self) -> None:
        _check_int(self, "min_workers", minimum=1)
        _check_int(self, "max_workers", minimum=1)
        if self.min_workers > self.max_workers:
            raise ConfigurationError(
                f"min_workers={self.min_workers} must be <= max_workers={self.max_workers}",
                setting="min_workers",
            )
        _check_float(self, "desired_wait_seconds", positive=True)
        _check_float(self, "wait_tolerance_seconds")
        _check_float(self, "cooldown_seconds")


@dataclass(frozen=True, kw_only=True)
class RunnerConfig:
    """Settings of one worker process.

    Attributes:
        num_fetchers: Concurrent receive loops (1-64). Fetchers are I/O-bound; 1-4
            covers almost every workload.
        num_workers: Tasks run concurrently (async tasks on the loop, sync tasks in
            threads, one shared limit). In tuning mode: the starting size, clamped
            into [min_workers, max_workers].
        batch_size: Most messages one fetcher leases per receive. A fetcher never
            leases more than the pool can start at once, whatever this says.
        block_seconds: How long one receive waits for a first message (> 0). Shutdown
            waits up to this long for receives in progress on backends whose receive
            cannot be cancelled safely.
        lease_seconds: A leased message not heartbeated for this long may be reclaimed
            by another worker (> 0).
        heartbeat_interval_seconds: How often the lease keeper extends every lease of
            the process; at most lease_seconds / 3. None (the default) becomes
            lease_seconds / 4 when the config is built, so reading it gives a number.
        reclaim_interval_seconds: How often the reclaimer looks for lapsed leases; at
            most lease_seconds. None (the default) becomes lease_seconds / 4.
        max_retries: Retries after a failed first attempt, for tasks that set none
            (>= 0; 0 means no retry).
        timeout_seconds: Time limit of one attempt, for tasks that set none (None: no
            limit).
        retry_base_seconds: Backoff before the first retry; doubles per attempt, with
            jitter.
        retry_max_seconds: Upper bound of the backoff.
        drain_timeout_seconds: At shutdown, how long running tasks may take to finish
            before they are cancelled and their messages released.
        failed_task_handler: Called once per terminal failure; None dead-letters.
        consumer_prefix: First part of this process's consumer names (default: the
            queue name and host name).
        tuning: Tuning mode settings, or None for a fixed pool.
        long_queue_threshold_seconds: Predicted wait above which `long_queue_hook` is
            called (once per episode).
        long_queue_hook: Called with the predicted wait when it exceeds the threshold.
        monitor_interval_seconds: How often the runner reads the backlog, publishes
            itself in the worker registry and recomputes the predicted wait (> 0).
        leader_ttl_seconds: Lease of the scheduler's elected leader (> 0), when the
            app has periodic schedules: renewed every third of it; a leader that dies
            is replaced within about 4/3 of it.
        observers: Extra `taskrunner.AttemptObserver` objects told about every
            delivery the runner carries to an outcome, after the built-in ones
            (metrics, the per-attempt log line, tracing).
    """

    num_fetchers: int = 1
    # Measured (bench/throughput.py --scale, issue 13): 10/10 reached 47 % of the best
    # no-op throughput and 80 % for a task doing one Redis call; 50/50 reaches 94 % and
    # 97 %, at half the server CPU per job. 50 threads for plain def tasks is still modest.
    num_workers: int = 50
    batch_size: int = 50
    block_seconds: float = 2.0
    lease_seconds: float = 60.0
    heartbeat_interval_seconds: float | None = None
    reclaim_interval_seconds: float | None = None
    max_retries: int = 3
    timeout_seconds: float | None = None
    retry_base_seconds: float = 1.0
    retry_max_seconds: float = 300.0
    drain_timeout_seconds: float = 30.0
    failed_task_handler: FailedTaskHandler | None = None
    consumer_prefix: str | None = None
    tuning: TuningConfig | None = None
    long_queue_threshold_seconds: float | None = None
    long_queue_hook: LongQueueHook | None = None
    monitor_interval_seconds: float = 2.0
    leader_ttl_seconds: float = 10.0
    observers: tuple[AttemptObserver, ...] = ()

    def __post_init__(self) -> None:
        _check_int(self, "num_fetchers", minimum=1, maximum=MAX_FETCHERS)
        _check_int(self, "num_workers", minimum=1)
        if self.num_fetchers > self.num_workers and self.tuning is None:
            raise ConfigurationError(
                f"num_fetchers={self.num_fetchers} must be <= num_workers={self.num_workers}: "
                "a fetcher only leases what a free worker can start",
                setting="num_fetchers",
            )
        _check_int(self, "batch_size", minimum=1)
        _check_float(self, "block_seconds", positive=True)
        _check_float(self, "lease_seconds", positive=True)
        lease = self.lease_seconds
        if self.heartbeat_interval_seconds is None:
            object.__setattr__(self, "heartbeat_interval_seconds", lease / 4)
        _check_float(self, "heartbeat_interval_seconds", positive=True)
        heartbeat = self.heartbeat_interval_seconds
        assert heartbeat is not None  # resolved just above
        if heartbeat > lease / 3:
            raise ConfigurationError(
                f"heartbeat_interval_seconds={heartbeat} must be at most "
                f"lease_seconds/3 = {lease / 3:g}, so a heartbeat always lands well before "
                "the lease lapses",
                setting="heartbeat_interval_seconds",
            )
        if self.reclaim_interval_seconds is None:
            object.__setattr__(self, "reclaim_interval_seconds", lease / 4)
        _check_float(self, "reclaim_interval_seconds", positive=True)
        reclaim = self.reclaim_interval_seconds
        assert reclaim is not None  # resolved just above
        if reclaim > lease:
            raise ConfigurationError(
                f"reclaim_interval_seconds={reclaim} must be at most "
                f"lease_seconds={lease:g}, or abandoned messages wait more than a lease "
                "longer than needed",
                setting="reclaim_interval_seconds",
            )
        _check_int(self, "max_retries", minimum=0)
        if self.timeout_seconds is not None:
            _check_float(self, "timeout_seconds", positive=True)
        _check_float(self, "retry_base_seconds", positive=True)
        _check_float(self, "retry_max_seconds", positive=True)
        if self.retry_max_seconds < self.retry_base_seconds:
            raise ConfigurationError(
                f"retry_max_seconds={self.retry_max_seconds} must be >= "
                f"retry_base_seconds={self.retry_base_seconds}",
                setting="retry_max_seconds",
            )
        _check_float(self, "drain_timeout_seconds")
        _check_callable(self, "failed_task_handler")
        _check_callable(self, "long_queue_hook")
        _check_float(self, "monitor_interval_seconds", positive=True)
        _check_float(self, "leader_ttl_seconds", positive=True)
        _check_observers(self.observers)
        if self.long_queue_threshold_seconds is not None:
            _check_float(self, "long_queue_threshold_seconds", positive=True)
        if (self.long_queue_hook is None) != (self.long_queue_threshold_seconds is None):
            raise ConfigurationError(
                "long_queue_hook and long_queue_threshold_seconds must be set together",
                setting="long_queue_hook",
            )
        # Any: the annotation does not stop a caller (or a loader) passing another type.
        prefix: Any = self.consumer_prefix
        if prefix is not None and not (
            isinstance(prefix, str) and 0 < len(prefix) <= 100 and prefix.isprintable()
        ):
            raise ConfigurationError(
                f"consumer_prefix={self.consumer_prefix!r} must be 1-100 printable characters",
                setting="consumer_prefix",
            )
        if self.tuning is not None and not isinstance(self.tuning, TuningConfig):
            raise ConfigurationError(
                f"tuning must be a TuningConfig or None, got {type(self.tuning).__name__}",
                setting="tuning",
            )

    @property
    def initial_workers(self) -> int:
        """Pool size at start: num_workers, clamped into the tuning band if any."""
        if self.tuning is None:
            return self.num_workers
        return min(max(self.num_workers, self.tuning.min_workers), self.tuning.max_workers)

    @property
    def most_workers(self) -> int:
        """The largest the pool can ever be."""
        return self.num_workers if self.tuning is None else self.tuning.max_workers

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Every setting's name, for configuration loaders."""
        return tuple(f.name for f in fields(cls))


def _check_int(obj: object, name: str, *, minimum: int, maximum: int | None = None) -> None:
    value: Any = getattr(obj, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{name}={value!r} must be an integer", setting=name)
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise ConfigurationError(f"{name}={value} must be {bound}", setting=name)


def _check_float(obj: object, name: str, *, positive: bool = False) -> None:
    value: Any = getattr(obj, name)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
        raise ConfigurationError(f"{name}={value} is too large", setting=name)
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ConfigurationError(f"{name}={value!r} must be a number of seconds", setting=name)
    if math.isinf(value):
        raise ConfigurationError(f"{name}={value} must be finite", setting=name)
    if positive and not value > 0:
        raise ConfigurationError(f"{name}={value} must be > 0", setting=name)
    if not positive and value < 0:
        raise ConfigurationError(f"{name}={value} must be >= 0", setting=name)


def _check_observers(observers: object) -> None:
    if not isinstance(observers, tuple):
        raise ConfigurationError(
            f"observers must be a tuple, got {type(observers).__name__}", setting="observers"
        )
    for observer in observers:
        for method in ("attempt_started", "attempt_finished"):
            if not callable(getattr(observer, method, None)):
                raise ConfigurationError(
                    f"observer {observer!r} has no {method} method (see AttemptObserver)",
                    setting="observers",
                )


def _check_callable(obj: object, name: str) -> None:
    value = getattr(obj, name)
    if value is not None and not callable(value):
        raise ConfigurationError(
            f"{name} must be callable or None, got {type(value).__name__}", setting=name
        )
