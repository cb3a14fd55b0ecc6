"""A task's flow control: its rate limit, concurrency limit and fairness key.

`FlowPolicy` is what ``@app.task(rate_limit=..., concurrency_limit=..., ...)`` declares;
`FlowPolicy.flow_for` turns a payload into the `taskrunner.queue.Flow` its message
carries, which the backend enforces when a worker receives (docs/flow-control.md).

Keys are namespaced by the task: ``"{task}:{key function(payload)}"``, or the task name
alone without a key function, so two tasks never share a limit by accident.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypedDict

from taskrunner.errors import ConfigurationError, TaskrunnerError
from taskrunner.queue import Flow
from taskrunner.queue_flow import FLOW_KEY_MAX_BYTES

__all__ = ["FlowKeyError", "FlowKeyFunc", "FlowOptions", "FlowPolicy", "parse_rate"]

FlowKeyFunc = Callable[[Any], str]
"""Makes a limit's key from a task's payload (the task name is prefixed)."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*/\s*([0-9]*)\s*([smhd])\s*")


class FlowOptions(TypedDict, total=False):
    """The flow options of ``App.task``, as `FlowPolicy` takes them."""

    rate_limit: str | None
    rate_burst: int | None
    rate_limit_key: FlowKeyFunc | None
    concurrency_limit: int | None
    concurrency_key: FlowKeyFunc | None
    fairness_key: FlowKeyFunc | None


class FlowKeyError(TaskrunnerError, ValueError):
    """A task's key function raised or returned no usable key; nothing was dispatched.

    Attributes:
        task: The task's name.
        setting: The key function's option (``rate_limit_key``, ``concurrency_key``,
            ``fairness_key``).
    """

    def __init__(self, message: str, *, task: str, setting: str) -> None:
        super().__init__(message)
        self.task = task
        self.setting = setting


def parse_rate(text: object, *, task: str) -> float:
    """Admissions per second of a rate like ``"100/s"``, ``"30/m"``, ``"5/h"``, ``"10/5s"``.

    Raises:
        ConfigurationError: Not such a text, or a count of 0.
    """
    match = _RATE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ConfigurationError(
            f"task {task!r}: rate_limit={text!r} must read COUNT/UNIT with UNIT s, m, h or d "
            "(optionally a number of them: '10/5s'), e.g. '100/s' or '30/m'",
            setting="rate_limit",
        )
    count = float(match.group(1))
    periods = int(match.group(2)) if match.group(2) else 1
    if count <= 0 or periods <= 0:
        raise ConfigurationError(
            f"task {task!r}: rate_limit={text!r} must allow more than 0 per period "
            "(to stop a task, do not dispatch it)",
            setting="rate_limit",
        )
    return count / (periods * _UNITS[match.group(3)])


class FlowPolicy:
    """One task's declared limits, checked when the task is declared.

    Args:
        task: The task's name.
        rate_limit: ``"COUNT/UNIT"`` (see `parse_rate`), global across every worker.
        rate_burst: How many may start at once before the rate applies (>= 1).
        rate_limit_key: One independent rate per key of the payload.
        concurrency_limit: At most this many attempts at once across every worker.
        concurrency_key: One independent concurrency limit per key of the payload.
        fairness_key: Keys that take turns when they have waiting messages; without
            it the concurrency key does, else the rate key. Not with
            `concurrency_limit` (its key is the one that takes turns).

    Raises:
        ConfigurationError: A malformed rate, a burst, limit or key function that is
            no such thing, or a key function without its limit.
    """

    def __init__(
        self,
        task: str,
        *,
        rate_limit: str | None = None,
        rate_burst: int | None = None,
        rate_limit_key: FlowKeyFunc | None = None,
        concurrency_limit: int | None = None,
        concurrency_key: FlowKeyFunc | None = None,
        fairness_key: FlowKeyFunc | None = None,
    ) -> None:
        self.task = task
        self.rate = None if rate_limit is None else parse_rate(rate_limit, task=task)
        self.burst = _count(task, "rate_burst", 1 if rate_burst is None else rate_burst)
        if rate_burst is not None and self.rate is None:
            raise ConfigurationError(
                f"task {task!r}: rate_burst needs a rate_limit", setting="rate_burst"
            )
        self.concurrency = (
            None
            if concurrency_limit is None
            else _count(task, "concurrency_limit", concurrency_limit)
        )
        for setting, func, limit, needs in (
            ("rate_limit_key", rate_limit_key, "rate_limit", self.rate),
            ("concurrency_key", concurrency_key, "concurrency_limit", self.concurrency),
        ):
            if func is not None and needs is None:
                raise ConfigurationError(f"task {task!r}: {setting} needs {limit}", setting=setting)
        if fairness_key is not None and self.concurrency is not None:
            # The concurrency key is the key that takes turns; a second one would
            # leave the limit counting on a key the messages do not queue behind.
            raise ConfigurationError(
                f"task {task!r}: fairness_key goes without concurrency_limit: the "
                "concurrency key is the key that takes turns (use concurrency_key)",
                setting="fairness_key",
            )
        for setting, func in (
            ("rate_limit_key", rate_limit_key),
            ("concurrency_key", concurrency_key),
            ("fairness_key", fairness_key),
        ):
            if func is not None and not callable(func):
                raise ConfigurationError(
                    f"task {task!r}: {setting} must be a function of the payload",
                    setting=setting,
                )
        self.rate_key = rate_limit_key
        self.concurrency_key = concurrency_key
        self.fairness_key = fairness_key

    @property
    def active(self) -> bool:
        """Whether the task's messages go through flow control at all."""
        return (
            self.rate is not None or self.concurrency is not None or self.fairness_key is not None
        )

    def flow_for(self, payload: Any) -> Flow | None:
        """The `Flow` a message with `payload` carries; None for a task without limits.

        Raises:
            FlowKeyError: A key function raised, or returned no non-empty str, or one
                too long to store.
        """
        if not self.active:
            return None
        rate_key = self._key(payload, self.rate_key, "rate_limit_key") if self.rate else None
        if self.fairness_key is not None:
            key = self._key(payload, self.fairness_key, "fairness_key")
        elif self.concurrency is not None:
            key = self._key(payload, self.concurrency_key, "concurrency_key")
        else:
            assert rate_key is not None  # active: one of the three is set
            key = rate_key
        return Flow(
            key=key,
            concurrency=self.concurrency,
            rate=self.rate,
            burst=self.burst if self.rate is not None else 1,
            rate_key=None if rate_key in (None, key) else rate_key,
        )

    def _key(self, payload: Any, func: FlowKeyFunc | None, setting: str) -> str:
        if func is None:
            return self.task
        try:
            value: object = func(payload)
        except Exception as exc:
            raise FlowKeyError(
                f"task {self.task!r}: {setting} raised {type(exc).__name__}: {exc}; "
                "nothing was dispatched",
                task=self.task,
                setting=setting,
            ) from exc
        if not isinstance(value, str) or not value:
            raise FlowKeyError(
                f"task {self.task!r}: {setting} must return a non-empty str, got "
                f"{type(value).__name__} {value!r:.80}; nothing was dispatched",
                task=self.task,
                setting=setting,
            )
        key = f"{self.task}:{value}"
        if "\x00" in key or len(key.encode("utf-8", "surrogatepass")) > FLOW_KEY_MAX_BYTES:
            raise FlowKeyError(
                f"task {self.task!r}: {setting} returned a key holding NUL or over "
                f"{FLOW_KEY_MAX_BYTES} bytes with the task name; nothing was dispatched",
                task=self.task,
                setting=setting,
            )
        return key


def _count(task: str, setting: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"task {task!r}: {setting}={value!r} must be a whole number >= 1", setting=setting
        )
    return value
