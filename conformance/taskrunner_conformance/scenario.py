"""One test's world: a fresh namespace, the queue handles opened in it, and time control.

Cases are ``async def case(self, s: Scenario)`` methods decorated with `conformance`,
which turns them into plain synchronous pytest tests that run the case with
`asyncio.run`. The suite therefore works whatever the host project's pytest-asyncio
mode is, and needs no plugin.

Time. The suite never sleeps on its own to wait for something. It lets time pass
through the harness (`Scenario.advance`), expires one lease through the harness's
``age_lease`` hook when there is one (`Scenario.age`), and derives every duration from
the harness's lease: `Scenario.lapse_age` is safely past a lease, `Scenario.live_age`
safely inside one. Things that should happen at once get `Scenario.grace` of real time.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Literal, TypeVar

import pytest

from taskrunner.queue import (
    Capabilities,
    ConsumerCleanup,
    Delivery,
    Leadership,
    MessageBrowser,
    MessageLookup,
    Queue,
    QueueAdmin,
    ResultStore,
    Scheduling,
    WorkerRegistry,
    browse_of,
    leadership_of,
    lookup_of,
    results_of,
    scheduling_of,
)

from .harness import HOOKS, AgesLeases, Harness, QueueFactoryHarness
from .report import note_backend, note_boundaries
from .settings import time_scale

__all__ = ["ConformanceBase", "Scenario", "conformance", "new_namespace", "optional_parts"]

# Real seconds granted, times the time scale, for something that should happen at once
# (a woken receive returning, a reconnect). Generous: it is only ever spent on failure.
GRACE_SECONDS = 2.0

# Polls that return nothing before a helper gives up (on real time: and the grace
# period is over), and polls of any kind before it gives up regardless.
IDLE_POLLS = 20
MAX_POLLS = 1000

# Real seconds, times the time scale, after which one test is failed as hung.
TEST_BUDGET_SECONDS = 120.0

TimeMode = Literal["clock", "age", "real"]

_Self = TypeVar("_Self", bound="ConformanceBase")
Case = Callable[[_Self, "Scenario"], Coroutine[Any, Any, None]]


class Scenario:
    """The context one conformance case runs in.

    Attributes:
        harness: The harness under test.
        namespace: This test's fresh namespace.
        queue: The first handle opened in the namespace.
        capabilities: What the backend claims (the harness's override, if it has one).
        requires_heartbeat: The queue's `requires_heartbeat`.
        lease: The harness's ``lease_seconds``: the ``idle_seconds`` passed to reclaim.
        precision: `Capabilities.lease_precision_seconds`.
        time_mode: ``"clock"`` when the harness moves a fake clock, ``"age"`` when it
            has an ``age_lease`` hook on real time, else ``"real"``.
    """

    queue: Queue
    capabilities: Capabilities
    requires_heartbeat: bool

    def __init__(self, harness: Harness, namespace: str) -> None:
        self.harness = harness
        self.namespace = namespace
        self.lease = float(harness.lease_seconds)
        if self.lease <= 0:
            raise ValueError(f"harness lease_seconds must be > 0, got {self.lease}")
        self.clock = getattr(harness, "clock", None)
        self.time_mode: TimeMode = (
            "clock"
            if self.clock is not None
            else "age"
            if isinstance(harness, AgesLeases)
            else "real"
        )
        self.precision = 0.0
        self._handles: list[Queue] = []
        self._namespaces = [namespace]
        self._consumers = 0

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Open the first handle and read the capabilities from it."""
        self.queue = await self.open()
        override = getattr(self.harness, "capabilities", None)
        self.capabilities = (
            override if isinstance(override, Capabilities) else self.queue.capabilities
        )
        self.requires_heartbeat = bool(self.queue.requires_heartbeat)
        self.precision = max(0.0, self.capabilities.lease_precision_seconds)
        note_backend(
            self.capabilities,
            requires_heartbeat=self.requires_heartbeat,
            lease_seconds=self.lease,
            time_mode=self.time_mode,
            hooks=[name for name, hook in HOOKS.items() if isinstance(self.harness, hook)],
            parts=optional_parts(self.queue),
            contract_version=getattr(self.queue, "contract_version", None),
        )

    async def open(self, namespace: str | None = None) -> Queue:
        """Open another handle on this test's queue (or on `namespace`), closed at the end."""
        if namespace is not None and namespace not in self._namespaces:
            self._namespaces.append(namespace)
        handle = await self.harness.open_queue(namespace or self.namespace)
        self._handles.append(handle)
        return handle

    def other_namespace(self) -> str:
        """A second fresh namespace, cleaned up with this test's."""
        return new_namespace()

    async def close(self, *, quiet: bool) -> None:
        """Close every handle and clean up the namespaces.

        With `quiet`, errors are swallowed (the test already failed); otherwise the
        first one is raised after everything was attempted.
        """
        errors: list[BaseException] = []
        for handle in self._handles:
            try:
                await handle.aclose()
            except Exception as exc:
                errors.append(exc)
        for namespace in self._namespaces:
            try:
                await self.harness.cleanup(namespace)
            except Exception as exc:
                errors.append(exc)
        if errors and not quiet:
            raise AssertionError(f"closing the queues failed: {errors[0]!r}") from errors[0]

    # -- gates -----------------------------------------------------------------------

    def require_heartbeat(self) -> None:
        """Skip unless leases lapse on this backend."""
        if not self.requires_heartbeat:
            pytest.skip("queue.requires_heartbeat is False: leases never lapse")

    def require_capability(self, name: str) -> None:
        """Skip unless `Capabilities.<name>` is claimed (true, or not ``"none"``)."""
        value = getattr(self.capabilities, name)
        if value is False or value == "none" or value is None:
            pytest.skip(f"backend does not claim capabilities.{name}")

    def require_admin(self, queue: Queue | None = None) -> QueueAdmin:
        """`queue.admin` (of the first handle by default); skip when the backend has none."""
        admin = (queue or self.queue).admin
        if admin is None:
            pytest.skip("queue.admin is None: the backend offers no QueueAdmin")
        return admin

    def require_registry(self, queue: Queue | None = None) -> WorkerRegistry:
        """`queue.worker_registry`; skip when the backend keeps none."""
        registry = (queue or self.queue).worker_registry
        if registry is None:
            pytest.skip("queue.worker_registry is None: the backend keeps no worker registry")
        return registry

    def require_cleanup(self, queue: Queue | None = None) -> ConsumerCleanup:
        """`queue.consumer_cleanup`; skip when the backend offers none."""
        cleanup = (queue or self.queue).consumer_cleanup
        if cleanup is None:
            pytest.skip("queue.consumer_cleanup is None: the backend offers no clean-up")
        return cleanup

    def require_scheduling(self, *flags: str, queue: Queue | None = None) -> Scheduling:
        """`scheduling_of(queue)`, skipping unless every capability in `flags` is claimed.

        A flag that is claimed while the part is missing fails the test: the claim is
        false. With no flags, only the part's absence skips.
        """
        for flag in flags:
            self.require_capability(flag)
        part = scheduling_of(queue or self.queue)
        if part is None:
            assert not flags, (
                f"the backend claims capabilities.{', capabilities.'.join(flags)} but "
                "scheduling_of(queue) is None: it offers no Scheduling part"
            )
            pytest.skip("scheduling_of(queue) is None: the backend offers no Scheduling part")
        return part

    def require_leadership(self, queue: Queue | None = None) -> Leadership:
        """`leadership_of(queue)`; skip unless ``capabilities.leadership`` is claimed.

        Claimed with no part fails the test, as in `require_scheduling`.
        """
        self.require_capability("leadership")
        part = leadership_of(queue or self.queue)
        assert part is not None, (
            "the backend claims capabilities.leadership but leadership_of(queue) is None"
        )
        return part

    def require_results(self, queue: Queue | None = None) -> ResultStore:
        """`results_of(queue)`; skip unless ``capabilities.results`` is claimed.

        Claimed with no part fails the test, as in `require_scheduling`.
        """
        self.require_capability("results")
        part = results_of(queue or self.queue)
        assert part is not None, (
            "the backend claims capabilities.results but results_of(queue) is None"
        )
        return part

    def require_lookup(self, queue: Queue | None = None) -> MessageLookup:
        """`lookup_of(queue)`; skip unless ``capabilities.lookup`` is claimed.

        Claimed with no part fails the test, as in `require_scheduling`.
        """
        self.require_capability("lookup")
        part = lookup_of(queue or self.queue)
        assert part is not None, (
            "the backend claims capabilities.lookup but lookup_of(queue) is None"
        )
        return part

    def require_browse(self, queue: Queue | None = None) -> MessageBrowser:
        """`browse_of(queue)`; skip unless ``capabilities.browse`` is claimed.

        Claimed with no part fails the test, as in `require_scheduling`.
        """
        self.require_capability("browse")
        part = browse_of(queue or self.queue)
        assert part is not None, (
            "the backend claims capabilities.browse but browse_of(queue) is None"
        )
        return part

    def wall(self) -> float:
        """Wall-clock Unix seconds: the harness's fake clock, else real time.

        `taskrunner.queue.AddRequest.due_at` is an instant on the backend's wall clock;
        on real time the suite takes the machine's, and a backend whose clock is off by
        more than its precision fails the due-time edges.
        """
        return self.clock.time() if self.clock is not None else time.time()

    def require_hook(self, hook: type, name: str) -> None:
        """Skip unless the harness implements the hook protocol `hook` (named `name`)."""
        if not isinstance(self.harness, hook):
            pytest.skip(f"harness has no {name} hook")

    def boundary(self, count: int = 1) -> None:
        """Count `count` boundary cases this test checked; the report shows the totals.

        Call it after the check: one side of one deadline, one kind of stale receipt for
        one operation, one extreme input.
        """
        note_boundaries(count)

    # -- names -------------------------------------------------------------------------

    def consumer(self, label: str) -> str:
        """A consumer name unique to this test, as a fresh process incarnation would have."""
        self._consumers += 1
        return f"{label}-{self._consumers}-{uuid.uuid4().hex[:6]}"

    # -- time --------------------------------------------------------------------------

    @property
    def margin(self) -> float:
        """How far past (or short of) a lease the suite stays to avoid the boundary."""
        return max(0.2 * self.lease, 3 * self.precision)

    @property
    def lapse_age(self) -> float:
        """An idle time certainly past the lease."""
        return self.lease + self.margin

    @property
    def live_age(self) -> float:
        """An idle time certainly inside the lease.

        90% of a lease on simulated time, 75% when aged by the hook (real time keeps
        running until the probe), half a lease on real time, where a sleep on a loaded
        machine may overshoot.
        """
        if self.time_mode == "real":
            return 0.5 * self.lease
        # Aged leases keep ageing in real time until the probe that follows.
        slack = 0.1 if self.time_mode == "clock" else 0.25
        return max(0.5 * self.lease, self.lease - max(slack * self.lease, 3 * self.precision))

    @property
    def grace(self) -> float:
        """Real seconds allowed for something that should happen at once."""
        return GRACE_SECONDS * time_scale()

    def now(self) -> float:
        """The suite's clock: the harness's fake clock, else real monotonic time."""
        return self.clock.monotonic() if self.clock is not None else time.monotonic()

    async def advance(self, seconds: float) -> None:
        """Let `seconds` pass on the backend's clock."""
        await self.harness.advance(seconds)

    async def age(self, queue: Queue, deliveries: Sequence[Delivery], seconds: float) -> None:
        """Make the leases of `deliveries` `seconds` older.

        Uses the harness's ``age_lease`` hook when there is one (only these leases age);
        otherwise lets time pass (every lease ages). Call it only right after the leases
        were granted or heartbeated.
        """
        if isinstance(self.harness, AgesLeases):
            for delivery in deliveries:
                await self.harness.age_lease(queue, delivery, seconds)
        else:
            await self.advance(seconds)

    async def lapse(self, queue: Queue, deliveries: Sequence[Delivery]) -> None:
        """Make the leases of `deliveries` lapse (and maybe every other lease too)."""
        await self.age(queue, deliveries, self.lapse_age)

    def gave_up(self, calls_left: int, deadline: float) -> bool:
        """Whether a polling loop should stop: out of calls and, on real time, out of time.

        On simulated time nothing changes between calls unless the test moves the
        clock, so running out of calls is enough.
        """
        if calls_left > 0:
            return False
        return self.time_mode == "clock" or time.monotonic() >= deadline

    async def pause(self) -> None:
        """A short pause between polls: a loop turn on simulated time, a few ms on real."""
        if self.time_mode == "clock":
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(0.01 * time_scale())

    # -- helpers -----------------------------------------------------------------------

    async def add(self, bodies: Sequence[bytes], queue: Queue | None = None) -> list[str]:
        """Add `bodies` and check one id per body came back."""
        ids = await (queue or self.queue).add(list(bodies))
        assert len(ids) == len(bodies), f"add of {len(bodies)} bodies returned {len(ids)} ids"
        return ids

    async def receive_n(
        self,
        queue: Queue,
        consumer: str,
        count: int,
        *,
        batch: int | None = None,
        lease: float | None = None,
    ) -> list[Delivery]:
        """Receive until exactly `count` deliveries arrived (without waiting in receive).

        Each is leased for `lease` (default: the harness's lease). Fails if more arrive
        or if they do not arrive within the grace period.
        """
        got: list[Delivery] = []
        idle_calls_left = IDLE_POLLS
        deadline = time.monotonic() + self.grace
        while len(got) < count:
            want = batch or count - len(got)
            more = await queue.receive(
                consumer, max_messages=want, wait_seconds=0, lease_seconds=lease or self.lease
            )
            assert len(more) <= want, f"receive(max_messages={want}) returned {len(more)}"
            got.extend(more)
            if not more:
                idle_calls_left -= 1
                assert not self.gave_up(idle_calls_left, deadline), (
                    f"expected {count} deliveries from receive, got {len(got)}"
                )
                await self.pause()
        assert len(got) == count, f"expected {count} deliveries, receive returned {len(got)}"
        return got

    async def reclaim_ids(
        self,
        queue: Queue,
        consumer: str,
        wanted: set[str],
        *,
        max_messages: int = 10,
        lease: float | None = None,
    ) -> list[Delivery]:
        """Reclaim until every id in `wanted` came back; return everything reclaimed.

        The reclaimer's own lease is `lease` (default: the harness's lease). Calls are
        bounded by the number of in-flight messages (reclaim makes progress through all
        of them) plus the grace period.
        """
        got: list[Delivery] = []
        seen: set[str] = set()
        in_flight = (await queue.stats()).in_flight
        calls_left = 2 * (in_flight // max_messages + 2)
        deadline = time.monotonic() + self.grace
        while not wanted <= seen:
            assert not self.gave_up(calls_left, deadline), (
                f"reclaim never returned lapsed message(s) {sorted(wanted - seen)}"
            )
            more = await queue.reclaim(
                consumer, lease_seconds=lease or self.lease, max_messages=max_messages
            )
            assert len(more) <= max_messages, (
                f"reclaim(max_messages={max_messages}) returned {len(more)}"
            )
            got.extend(more)
            seen.update(d.message_id for d in more)
            calls_left -= 1
            if not more:
                await self.pause()
        return got

    async def collect(
        self, queue: Queue, consumer: str, wanted: set[str], *, max_messages: int = 10
    ) -> list[Delivery]:
        """Receive and reclaim until every id in `wanted` came back; return all deliveries.

        A redelivered message may come back through either method (a backend may park
        released messages where only reclaim finds them), so both are polled.
        """
        got: list[Delivery] = []
        seen: set[str] = set()
        idle_calls_left = IDLE_POLLS
        deadline = time.monotonic() + self.grace
        for _ in range(MAX_POLLS):
            if wanted <= seen:
                return got
            more = await queue.receive(
                consumer, max_messages=max_messages, wait_seconds=0, lease_seconds=self.lease
            )
            more += await queue.reclaim(
                consumer, lease_seconds=self.lease, max_messages=max_messages
            )
            got.extend(more)
            seen.update(d.message_id for d in more)
            if not more:
                idle_calls_left -= 1
                assert not self.gave_up(idle_calls_left, deadline), (
                    f"message(s) {sorted(wanted - seen)} were never delivered again"
                )
                await self.pause()
        raise AssertionError(f"message(s) {sorted(wanted - seen)} did not come back")

    async def finishes_within(self, task: asyncio.Task[Any], seconds: float) -> bool:
        """Let `seconds` pass (on simulated time) and report whether `task` finished.

        On real time the task gets `seconds` plus the grace period.
        """
        if self.time_mode == "clock":
            await self.advance(seconds)
            await asyncio.wait({task}, timeout=self.grace)
        else:
            await asyncio.wait({task}, timeout=seconds + self.grace)
        return task.done()

    async def nothing_for(self, queue: Queue, consumer: str, ids: set[str]) -> None:
        """Check neither receive nor reclaim hands any of `ids` to `consumer` now."""
        received = await queue.receive(
            consumer, max_messages=100, wait_seconds=0, lease_seconds=self.lease
        )
        reclaimed = await queue.reclaim(consumer, lease_seconds=self.lease, max_messages=100)
        leaked = {d.message_id for d in received + reclaimed} & ids
        assert not leaked, f"message(s) {sorted(leaked)} were handed to {consumer}"
        # Whatever else came back is not ours to keep; give it back untouched.
        others = [d for d in received + reclaimed if d.message_id not in ids]
        if others:
            await queue.release(others)


def optional_parts(queue: Queue) -> list[str]:
    """The names of the optional protocols `queue` offers through its typed accessors."""
    return [
        name
        for name, part in (
            ("admin", queue.admin),
            ("worker_registry", queue.worker_registry),
            ("consumer_cleanup", queue.consumer_cleanup),
            ("scheduling", scheduling_of(queue)),
            ("leadership", leadership_of(queue)),
            ("results", results_of(queue)),
            ("lookup", lookup_of(queue)),
            ("browse", browse_of(queue)),
        )
        if part is not None
    ]


def new_namespace() -> str:
    """A fresh namespace: ``tc-`` and 12 hex digits."""
    return f"tc-{uuid.uuid4().hex[:12]}"


class ConformanceBase:
    """What every case mixin relies on: a harness per test and a way to run a case.

    Subclass `taskrunner_conformance.QueueConformance` and override `make_harness`,
    or, for real time without hooks, just ``async def open_queue(self, namespace)``.
    """

    # Seconds of lease for the `open_queue` shortcut; None: 1 s times the time scale.
    lease_seconds: float | None = None

    def make_harness(self) -> Harness:
        """A fresh harness for one test; override this (or `open_queue`)."""
        if type(self).open_queue is not ConformanceBase.open_queue:
            return QueueFactoryHarness(self.open_queue, lease_seconds=self.lease_seconds)
        raise NotImplementedError(
            f"{type(self).__name__} must override make_harness() or open_queue()"
        )

    async def open_queue(self, namespace: str) -> Queue:
        """Shortcut for a harness without hooks: open a handle on `namespace`'s queue."""
        raise NotImplementedError

    def run_case(self: _Self, case: Case[_Self]) -> None:
        """Run one case on a fresh harness and namespace inside `asyncio.run`."""
        harness = self.make_harness()
        asyncio.run(_drive(self, case, harness))


async def _drive(owner: _Self, case: Case[_Self], harness: Harness) -> None:
    scenario = Scenario(harness, new_namespace())
    failed = True
    try:
        async with asyncio.timeout(TEST_BUDGET_SECONDS * time_scale()):
            await scenario.start()
            await case(owner, scenario)
        failed = False
    finally:
        # A skip or failure inside the case must not be masked by a close error.
        try:
            async with asyncio.timeout(GRACE_SECONDS * 5 * time_scale()):
                await scenario.close(quiet=failed)
        except TimeoutError:
            if not failed:
                raise AssertionError("closing the queues or cleaning up hung") from None


def conformance(*property_ids: str) -> Callable[[Case[_Self]], Callable[[_Self], None]]:
    """Turn an async case into a synchronous pytest test checking `property_ids`.

    The test keeps the case's name and docstring and carries the ids in its
    ``conformance_properties`` attribute, which the report reads.
    """

    def decorate(case: Case[_Self]) -> Callable[[_Self], None]:
        def test(self: _Self) -> None:
            self.run_case(case)

        # Not functools.wraps: pytest would follow __wrapped__ and take the case's
        # scenario parameter for a fixture.
        test.__name__ = case.__name__
        test.__qualname__ = case.__qualname__
        test.__doc__ = case.__doc__
        test.__module__ = case.__module__
        test.conformance_properties = property_ids  # type: ignore[attr-defined]
        return test

    return decorate
