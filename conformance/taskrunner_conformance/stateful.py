"""A hypothesis state machine that drives a backend and checks it against the model.

`QueueMachine` takes a harness factory in its constructor (the zarr.testing pattern),
opens two handles on a fresh queue, and lets hypothesis pick operations: add,
receive, reclaim, heartbeat, ack, release, dead-letter, consumer crash, time passing,
and a full drain. Every result is checked by `taskrunner_conformance.model.ReferenceModel`;
after every step `len` and the dead-letter count must match it.

Time passes through the harness's fake clock (harnesses with a ``clock``) or through
its ``age_lease`` hook, which makes chosen leases lapse on a real-time backend
without waiting; a harness with neither cannot run the machine.

Run it from your own tests with::

    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(lambda: QueueMachine(MyHarness), settings=machine_settings())
"""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from taskrunner.queue import Delivery, Queue

from .harness import AgesLeases, Harness, HarnessFactory
from .model import ReferenceModel
from .scenario import GRACE_SECONDS, new_namespace
from .settings import scaled_count, shrink, time_scale

__all__ = ["QueueMachine", "machine_settings", "machine_time_mode"]

_T = TypeVar("_T")

# Hypothesis examples per run and steps per example, before the effort multiplier.
BASE_EXAMPLES = 100
STEPS_PER_EXAMPLE = 50

# Non-empty, so that a backend dropping bodies cannot pass by luck (P1 covers empty ones).
_bodies = st.binary(min_size=1, max_size=12)


def machine_settings() -> settings:
    """Settings for `QueueMachine` scaled by ``TASKRUNNER_CONFORMANCE_EFFORT``.

    No deadline (real backends have jittery latency), no example database (the suite
    must not write into the directory it is run from; failures print their steps).
    """
    base = settings(
        max_examples=scaled_count(BASE_EXAMPLES),
        stateful_step_count=STEPS_PER_EXAMPLE,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    if shrink():
        return base
    return settings(base, phases=[Phase.explicit, Phase.reuse, Phase.generate])


def machine_time_mode(harness: Harness) -> str | None:
    """``"clock"`` or ``"age"``: how the machine can make leases lapse; None if it cannot."""
    if getattr(harness, "clock", None) is not None:
        return "clock"
    if isinstance(harness, AgesLeases):
        return "age"
    return None


class QueueMachine(RuleBasedStateMachine):
    """Random operations on one queue, each checked against the reference model.

    Args:
        make_harness: Called once per example for a fresh harness.
    """

    def __init__(self, make_harness: HarnessFactory) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.harness = make_harness()
        mode = machine_time_mode(self.harness)
        if mode is None:
            raise ValueError("QueueMachine needs a harness with a clock or an age_lease hook")
        self.mode = mode
        self.namespace = new_namespace()
        self.handles: list[Queue] = [self._run(self.harness.open_queue(self.namespace))]
        self.handles.append(self._run(self.harness.open_queue(self.namespace)))
        first = self.handles[0]
        override = getattr(self.harness, "capabilities", None)
        capabilities = override if override is not None else first.capabilities
        self.lease = float(self.harness.lease_seconds)
        self.admin = first.admin is not None
        self.model = ReferenceModel(
            lease=self.lease,
            precision=capabilities.lease_precision_seconds,
            requires_heartbeat=first.requires_heartbeat,
            real_time=mode == "age",
            max_batch=capabilities.max_batch,
        )
        self._names = itertools.count()
        self.consumers = [self._new_consumer() for _ in range(3)]
        self.crashed: set[str] = set()
        # Every delivery handed out, current or stale, in order; stale ones probe fencing.
        self.deliveries: list[Delivery] = []
        # Receipts given back by release: the contract does not say whether they stay
        # valid until the message is redelivered, so they are not used in between.
        self.released_receipts: set[tuple[str, str, int]] = set()

    # -- plumbing ------------------------------------------------------------------------

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        return self.loop.run_until_complete(asyncio.wait_for(coroutine, timeout=60 * time_scale()))

    def _new_consumer(self) -> str:
        return f"m{next(self._names)}-{self.namespace[-4:]}"

    def _handle(self, consumer: str) -> Queue:
        return self.handles[zlib.crc32(consumer.encode()) % len(self.handles)]

    def _usable(self) -> list[Delivery]:
        usable = []
        for delivery in self.deliveries:
            if delivery.receipt.consumer in self.crashed:
                continue
            key = (delivery.message_id, delivery.receipt.consumer, delivery.receipt.delivery_count)
            message = self.model.messages[delivery.message_id]
            if (
                key in self.released_receipts
                and message.count == delivery.delivery_count
                and message.state == "released"
            ):
                continue
            usable.append(delivery)
        return usable

    def _stale(self) -> list[Delivery]:
        return [d for d in self._usable() if not self.model.is_current(d)]

    def _contested(self) -> list[Delivery]:
        """Stale deliveries of messages now leased to somebody: the fencing cases."""
        return [d for d in self._stale() if self.model.messages[d.message_id].state == "in_flight"]

    def _pick(self, data: st.DataObject) -> list[Delivery]:
        usable = self._usable()
        pools = {
            "current": [d for d in usable if self.model.is_current(d)],
            "contested": self._contested(),
            "any": usable,
        }
        kind = data.draw(st.sampled_from([k for k, v in pools.items() if v]), label="pool")
        return data.draw(
            st.lists(
                st.sampled_from(pools[kind]),
                min_size=1,
                max_size=3,
                unique_by=lambda d: (d.message_id, d.receipt.consumer, d.receipt.delivery_count),
            ),
            label="deliveries",
        )

    def _note(self, got: Sequence[Delivery]) -> None:
        self.deliveries.extend(got)

    def teardown(self) -> None:
        """Close the handles, clean up, close the loop."""
        try:
            for handle in self.handles:
                self._run(handle.aclose())
            self._run(self.harness.cleanup(self.namespace))
        finally:
            self.loop.close()

    # -- rules ---------------------------------------------------------------------------

    @initialize(bodies=st.lists(_bodies, min_size=1, max_size=6))
    def start_with_messages(self, bodies: list[bytes]) -> None:
        """Every example starts with a few messages, so early steps have work to do."""
        ids = self._run(self.handles[0].add(bodies))
        self.model.added(bodies, ids)

    @precondition(lambda self: self.model.requires_heartbeat)
    @rule(who=st.integers(0, 2), max_messages=st.integers(1, 4))
    def lapse_and_reclaim(self, who: int, max_messages: int) -> None:
        """Let every lease lapse, then reclaim: the shortest path to stale receipts."""
        if self.mode == "clock":
            seconds = 1.5 * self.lease
            self._run(self.harness.advance(seconds))
            self.model.advance(seconds)
        else:
            assert isinstance(self.harness, AgesLeases)
            for delivery in self.deliveries:
                if self.model.is_current(delivery):
                    self._run(self.harness.age_lease(self.handles[0], delivery, 2 * self.lease))
                    self.model.age(delivery.message_id, 2 * self.lease)
        self.reclaim(who, max_messages)

    @rule(bodies=st.lists(_bodies, min_size=1, max_size=4), handle=st.integers(0, 1))
    def add(self, bodies: list[bytes], handle: int) -> None:
        """Add bodies through either handle."""
        ids = self._run(self.handles[handle].add(bodies))
        self.model.added(bodies, ids)

    @rule(who=st.integers(0, 2), max_messages=st.integers(1, 4))
    def receive(self, who: int, max_messages: int) -> None:
        """Receive without waiting."""
        consumer = self.consumers[who]
        got = self._run(
            self._handle(consumer).receive(
                consumer, max_messages=max_messages, wait_seconds=0, lease_seconds=self.lease
            )
        )
        self.model.received(consumer, max_messages, got)
        self._note(got)

    @rule(who=st.integers(0, 2), max_messages=st.integers(1, 4))
    def reclaim(self, who: int, max_messages: int) -> None:
        """Reclaim with the harness's lease as the idle bound."""
        consumer = self.consumers[who]
        got = self._run(
            self._handle(consumer).reclaim(
                consumer, lease_seconds=self.lease, max_messages=max_messages
            )
        )
        self.model.reclaimed(consumer, max_messages, got)
        self._note(got)

    @precondition(lambda self: bool(self._usable()))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        """Heartbeat current and stale deliveries."""
        sent = self._pick(data)
        lost = self._run(self._handle(sent[0].receipt.consumer).heartbeat(sent))
        self.model.heartbeat(sent, lost)

    @precondition(lambda self: bool(self._usable()))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        """Ack current and stale deliveries."""
        sent = self._pick(data)
        lost = self._run(self._handle(sent[0].receipt.consumer).ack(sent))
        self.model.acked(sent, lost)

    @precondition(lambda self: bool(self._usable()))
    @rule(data=st.data(), delay=st.sampled_from([0.0, 0.5, 2.0]))
    def release(self, data: st.DataObject, delay: float) -> None:
        """Release with a delay (0 when time is real: the machine does not sleep)."""
        sent = self._pick(data)
        delay_seconds = delay * self.lease if self.mode == "clock" else 0.0
        lost = self._run(
            self._handle(sent[0].receipt.consumer).release(sent, delay_seconds=delay_seconds)
        )
        for delivery in sent:
            if delivery not in lost:
                self.released_receipts.add(
                    (
                        delivery.message_id,
                        delivery.receipt.consumer,
                        delivery.receipt.delivery_count,
                    )
                )
        self.model.released(sent, lost, delay_seconds)

    @precondition(lambda self: bool(self._usable()))
    @rule(data=st.data(), reason=st.sampled_from(["poison", "too many deliveries"]))
    def dead_letter(self, data: st.DataObject, reason: str) -> None:
        """Dead-letter current and stale deliveries."""
        sent = self._pick(data)
        lost = self._run(self._handle(sent[0].receipt.consumer).dead_letter(sent, reason=reason))
        self.model.dead_lettered(sent, lost, reason)
        if self.admin:
            admin = self.handles[1].admin
            assert admin is not None, "the second handle offers no admin, the first one does"
            letters = self._run(admin.list_dead_letters(limit=100_000))
            seen = [(d.original_id, d.body, d.reason, d.delivery_count) for d in letters]
            assert seen == self.model.dead_letters, (
                f"dead letters {seen} differ from the model's {self.model.dead_letters}"
            )

    @precondition(lambda self: self.model.requires_heartbeat)
    @rule(who=st.integers(0, 2))
    def crash(self, who: int) -> None:
        """A consumer dies holding its leases; a new incarnation takes its place."""
        self.crashed.add(self.consumers[who])
        self.consumers[who] = self._new_consumer()

    @precondition(lambda self: self._stale())
    @rule(data=st.data())
    def probe_stale(self, data: st.DataObject) -> None:
        """A stale receipt is refused by heartbeat, ack, release and dead-letter alike."""
        contested = self._contested()
        prefer_contested = bool(contested) and data.draw(st.booleans(), label="contested")
        pool = contested if prefer_contested else self._stale()
        delivery = data.draw(st.sampled_from(pool), label="stale delivery")
        handle = self._handle(delivery.receipt.consumer)
        self.model.heartbeat([delivery], self._run(handle.heartbeat([delivery])))
        self.model.acked([delivery], self._run(handle.ack([delivery])))
        self.model.released([delivery], self._run(handle.release([delivery])), 0.0)
        self.model.dead_lettered(
            [delivery], self._run(handle.dead_letter([delivery], reason="stale")), "stale"
        )

    @precondition(
        lambda self: self.mode == "clock" and any(self.model.is_current(d) for d in self._usable())
    )
    @rule(fraction=st.sampled_from([0.3, 0.6, 0.9]), who=st.integers(0, 2))
    def heartbeat_wait_reclaim(self, fraction: float, who: int) -> None:
        """Heartbeat every current lease, let part of a lease pass, reclaim: leases hold."""
        current = [d for d in self._usable() if self.model.is_current(d)]
        self.model.heartbeat(current, self._run(self.handles[0].heartbeat(current)))
        seconds = fraction * self.lease
        self._run(self.harness.advance(seconds))
        self.model.advance(seconds)
        self.reclaim(who, 4)

    @precondition(lambda self: self.mode == "clock")
    @rule(fraction=st.sampled_from([0.3, 0.6, 1.5, 3.0]))
    def advance(self, fraction: float) -> None:
        """Let time pass on the fake clock."""
        seconds = fraction * self.lease
        self._run(self.harness.advance(seconds))
        self.model.advance(seconds)

    @precondition(
        lambda self: self.mode == "age" and any(self.model.is_current(d) for d in self.deliveries)
    )
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        """Make one current lease lapse through the harness's age_lease hook."""
        current = [d for d in self.deliveries if self.model.is_current(d)]
        delivery = data.draw(st.sampled_from(current), label="lease to expire")
        assert isinstance(self.harness, AgesLeases)
        seconds = 2 * self.lease
        self._run(self.harness.age_lease(self._handle("x"), delivery, seconds))
        self.model.age(delivery.message_id, seconds)

    @precondition(lambda self: bool(self.model.live()))
    @rule()
    def drain(self) -> None:
        """Everything not yet completed comes out of receive and reclaim; ack it all."""
        consumer = self._new_consumer()
        handle = self._handle(consumer)
        if self.mode == "clock":
            seconds = 2 * self.lease + 2 * self.lease
            self._run(self.harness.advance(seconds))
            self.model.advance(seconds)
        else:
            assert isinstance(self.harness, AgesLeases)
            for delivery in self.deliveries:
                if self.model.is_current(delivery):
                    self._run(self.harness.age_lease(handle, delivery, 2 * self.lease))
                    self.model.age(delivery.message_id, 2 * self.lease)
        if not self.model.requires_heartbeat:
            current = [d for d in self._usable() if self.model.is_current(d)]
            if current:
                self.model.acked(current, self._run(handle.ack(current)))
        calls = 2 * (len(self.model.live()) // 4 + 2)
        deadline = time.monotonic() + GRACE_SECONDS * time_scale()
        for _ in range(4 * len(self.model.live()) + 20):
            if not self.model.live():
                return
            left = [m.id for m in self.model.live()]
            assert calls > 0 or (self.mode == "age" and time.monotonic() < deadline), (
                f"drain: receive and reclaim stopped returning messages; still live: {left}"
            )
            got = self._run(
                handle.receive(consumer, max_messages=4, wait_seconds=0, lease_seconds=self.lease)
            )
            self.model.received(consumer, 4, got)
            more = self._run(handle.reclaim(consumer, lease_seconds=self.lease, max_messages=4))
            self.model.reclaimed(consumer, 4, more)
            taken = got + more
            self._note(taken)
            if taken:
                self.model.acked(taken, self._run(handle.ack(taken)))
            else:
                calls -= 1
                if self.mode == "age":
                    self._run(asyncio.sleep(0.01 * time_scale()))
        raise AssertionError("drain: messages kept coming back; acked ones too?")

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def length_and_dead_count_match(self) -> None:
        """`len` is ready + delayed + in flight; stats agree; dead letters are counted apart."""
        length = self._run(self.handles[0].len())
        assert length == self.model.length(), (
            f"len() is {length}, the model says {self.model.length()}"
        )
        stats = self._run(self.handles[1].stats())
        assert stats.ready + stats.delayed + stats.in_flight == length, (
            f"stats ready {stats.ready} + delayed {stats.delayed} + in_flight "
            f"{stats.in_flight} != len {length}"
        )
        assert stats.dead == self.model.dead, (
            f"stats.dead is {stats.dead}, the model says {self.model.dead}"
        )
