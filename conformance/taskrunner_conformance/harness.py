"""What a backend author supplies: a harness that opens queues and controls time.

The suite creates one harness per test (and one per hypothesis example), so a harness
may hold per-test state such as a `taskrunner.testing.FakeClock`. Everything the suite
needs from it is in `Harness`; the optional hooks below it unlock more properties, and
a property whose hook is missing is skipped with the reason.

The smallest harness wraps a queue factory and lets real time pass::

    from taskrunner_conformance import BaseHarness

    class MyHarness(BaseHarness):
        async def open_queue(self, namespace: str) -> Queue:
            return await MyQueue.connect(prefix=namespace, lease_seconds=self.lease_seconds)

Faster and more deterministic: give the backend a fake clock and move it in
`Harness.advance` (set the harness's ``clock`` attribute to it), or implement
`AgesLeases.age_lease` so the suite can expire one lease without waiting.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeAlias, runtime_checkable

from taskrunner.clock import Clock
from taskrunner.queue import Capabilities, DeadLetter, Delivery, Queue

from .settings import time_scale

__all__ = [
    "AgesLeases",
    "BaseHarness",
    "CrashesBackend",
    "Harness",
    "HarnessFactory",
    "InjectsRaw",
    "MeasuresStorage",
    "QueueFactory",
    "QueueFactoryHarness",
    "ReadsDeadLetters",
    "RemovesPayloads",
    "RestartsBackend",
    "StopsBackend",
    "load_harness_factory",
]

# The lease a harness uses when it does not choose one, in real seconds before scaling.
# Long enough that a loaded two-core machine finishes a few round trips inside it,
# short enough that tests waiting out a lease stay quick.
DEFAULT_LEASE_SECONDS = 1.0


@runtime_checkable
class Harness(Protocol):
    """The backend under test, as the suite sees it.

    Besides the members below, the suite reads two optional attributes with
    `getattr`: ``capabilities`` (a `Capabilities` that overrides what the queue
    reports, to test a narrower configuration) and ``clock`` (the
    `taskrunner.clock.Clock` the backend measures leases on, when `advance` moves a
    fake clock; the suite then reads time from it and treats time as simulated, and
    takes its ``time()`` as the backend's wall clock for `AddRequest.due_at`).
    """

    @property
    def lease_seconds(self) -> float:
        """The lease the suite grants: the ``lease_seconds`` it passes to receive and reclaim.

        Some tests grant other lengths too (the lease travels with the delivery). A
        backend whose broker redelivers on its own must not tie the broker's timeout to
        this value: that timeout is only a safety net, far longer than any lease (see
        "Brokers that redeliver on their own" in docs/writing-a-backend.md).
        """
        ...

    async def open_queue(self, namespace: str) -> Queue:
        """Open a handle on the queue named by `namespace`.

        Every call with the same `namespace` returns an independent handle (closed
        independently) on the same logical queue, as a second worker process would
        have; different namespaces are different queues. Namespaces are short
        (at most 24 characters of ``[a-z0-9-]``) and fresh for every test. The suite
        closes every handle it opens.
        """
        ...

    async def advance(self, seconds: float) -> None:
        """Let `seconds` pass on the backend's clock (move a fake clock, or sleep)."""
        ...

    async def cleanup(self, namespace: str) -> None:
        """Delete whatever the test left in `namespace`; called once at the end of each test."""
        ...


@runtime_checkable
class AgesLeases(Protocol):
    """Hook: expire one lease without waiting (for example XCLAIM with ``IDLE`` on Redis)."""

    async def age_lease(self, queue: Queue, delivery: Delivery, seconds: float) -> None:
        """Add `seconds` to the idle time of the lease on the message `delivery` holds.

        Owner and delivery count stay as they are. The suite ages leases right after
        they were granted or heartbeated, so setting the idle time to `seconds`
        instead of adding is acceptable, and so is ageing whatever lease is current
        on the message when `delivery` is stale.
        """
        ...


@runtime_checkable
class InjectsRaw(Protocol):
    """Hook: store an entry the backend cannot read, bypassing `Queue.add`."""

    async def inject_raw(self, queue: Queue) -> None:
        """Put one entry in the queue's storage that the backend cannot turn into a body.

        For example a stream entry without the body field. Property P28 checks that
        it never breaks `receive` and is dead-lettered or delivered, never retried
        forever.
        """
        ...


@runtime_checkable
class RemovesPayloads(Protocol):
    """Hook: delete a message's payload underneath its lease (trimming, manual deletion)."""

    async def remove_payload(self, queue: Queue, delivery: Delivery) -> None:
        """Delete the stored body of the in-flight message `delivery` holds, nothing else."""
        ...


@runtime_checkable
class RestartsBackend(Protocol):
    """Hook: restart the backend's server gracefully (property P37)."""

    async def restart_backend(self) -> None:
        """Stop and start the server, keeping what the backend claims is persistent."""
        ...


@runtime_checkable
class StopsBackend(Protocol):
    """Hook: take the server away and bring it back (property P39)."""

    async def stop_backend(self) -> None:
        """Make the server unreachable until `start_backend`."""
        ...

    async def start_backend(self) -> None:
        """Make the server reachable again, at the same address."""
        ...


@runtime_checkable
class CrashesBackend(Protocol):
    """Hook: kill the server without warning and start it again (property P38)."""

    async def crash_backend(self) -> None:
        """Kill the server (``kill -9``) and start it again at the same address."""
        ...


@runtime_checkable
class MeasuresStorage(Protocol):
    """Hook: report how much storage a queue uses (property P36)."""

    async def storage_size(self, queue: Queue) -> int:
        """A size that grows with every message or record the backend keeps for the queue.

        Entries, keys, rows or bytes: any unit, as long as leaked state makes it grow.
        """
        ...


@runtime_checkable
class ReadsDeadLetters(Protocol):
    """Hook: read the dead-letter store of a backend that offers no `QueueAdmin`.

    The suite uses `Queue.admin.list_dead_letters` when the backend has it; this hook
    lets a backend without admin operations prove that its dead letters keep body,
    reason, delivery count and time (properties P26, X30, X31, X37).
    """

    async def dead_letters(self, queue: Queue) -> list[DeadLetter]:
        """Every dead letter of `queue`'s queue, oldest first, as the backend stores it."""
        ...


# Hook protocols by the name the report and skip reasons use.
HOOKS: dict[str, type] = {
    "age_lease": AgesLeases,
    "inject_raw": InjectsRaw,
    "remove_payload": RemovesPayloads,
    "restart_backend": RestartsBackend,
    "stop_backend/start_backend": StopsBackend,
    "crash_backend": CrashesBackend,
    "storage_size": MeasuresStorage,
    "dead_letters": ReadsDeadLetters,
}


class BaseHarness:
    """A convenient base: real time, no cleanup, the default lease; override `open_queue`.

    Attributes:
        lease_seconds: 1 second times ``TASKRUNNER_CONFORMANCE_TIME_SCALE`` unless given.
        capabilities: None: the suite uses the queue's own claims.
        clock: None: real time.
    """

    capabilities: Capabilities | None = None
    clock: Clock | None = None

    def __init__(self, *, lease_seconds: float | None = None) -> None:
        self.lease_seconds = (
            DEFAULT_LEASE_SECONDS * time_scale() if lease_seconds is None else lease_seconds
        )

    async def open_queue(self, namespace: str) -> Queue:
        """Open a handle on the queue named by `namespace`; subclasses must override this."""
        raise NotImplementedError(f"{type(self).__name__} must implement open_queue()")

    async def advance(self, seconds: float) -> None:
        """Sleep for `seconds` of real time."""
        await asyncio.sleep(max(0.0, seconds))

    async def cleanup(self, namespace: str) -> None:
        """Nothing to clean up."""


QueueFactory: TypeAlias = Callable[[str], Awaitable[Queue]]
"""``async def factory(namespace: str) -> Queue``: the shortest way to plug a backend in."""

HarnessFactory: TypeAlias = Callable[[], Harness]
"""A zero-argument callable (often the harness class) that returns a fresh harness."""


class QueueFactoryHarness(BaseHarness):
    """A harness around a bare queue factory: real time, no hooks.

    The factory must return independent handles on one logical queue per namespace,
    leased for `lease_seconds` if the backend has a lease setting of its own.

    Args:
        factory: ``async def factory(namespace: str) -> Queue``.
        lease_seconds: Defaults to 1 second times the time scale.
    """

    def __init__(self, factory: QueueFactory, *, lease_seconds: float | None = None) -> None:
        super().__init__(lease_seconds=lease_seconds)
        self._factory = factory

    async def open_queue(self, namespace: str) -> Queue:
        """Call the factory."""
        return await self._factory(namespace)


def load_harness_factory(spec: str) -> HarnessFactory:
    """Resolve ``package.module:name`` to a harness factory.

    `name` may be (1) a zero-argument callable returning a harness (a harness class or
    a function), called once per test, or (2) an ``async def factory(namespace) ->
    Queue`` queue factory, wrapped in a `QueueFactoryHarness`. Attribute paths
    (``module:Class.method``) are allowed.

    Raises:
        ValueError: `spec` is not of the form ``module:name`` or names something else.
        ImportError: The module cannot be imported.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected PACKAGE.MODULE:FACTORY, got {spec!r}")
    target: object = importlib.import_module(module_name)
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no attribute {attribute!r}") from None
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    if inspect.iscoroutinefunction(target):
        queue_factory: QueueFactory = target

        def make_factory_harness() -> Harness:
            return QueueFactoryHarness(queue_factory)

        return make_factory_harness
    return _checked_harness_factory(spec, target)


def _checked_harness_factory(spec: str, factory: Callable[[], object]) -> HarnessFactory:
    def make_harness() -> Harness:
        harness = factory()
        if not isinstance(harness, Harness):
            raise TypeError(
                f"{spec}() returned {type(harness).__name__}, which lacks the Harness members "
                "lease_seconds, open_queue, advance and cleanup; a queue factory must be "
                "`async def factory(namespace) -> Queue`"
            )
        return harness

    return make_harness
