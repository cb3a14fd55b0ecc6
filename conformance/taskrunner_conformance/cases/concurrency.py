"""Concurrent clients judged by the history checker; producers; storage (P31-P34, P36)."""

from __future__ import annotations

import asyncio
import random

from ..harness import MeasuresStorage
from ..history import History, check_history
from ..scenario import ConformanceBase, Scenario, conformance
from ..settings import scaled_count
from ..workload import Faults, run_workload

__all__ = ["ConcurrencyCases"]


class ConcurrencyCases(ConformanceBase):
    """P31-P34 and P36."""

    @conformance("P31")
    async def test_no_two_consumers_ever_hold_a_live_lease_on_the_same_message(
        self, s: Scenario
    ) -> None:
        """Eight consumers, stalls that let leases lapse, reclaims: the history has no overlap."""
        s.require_heartbeat()
        history = History(s.now)

        await run_workload(
            s, history, messages=scaled_count(200, minimum=40), faults=Faults(stalls=True), seed=31
        )

        report = check_history(history, lease_seconds=s.lease, precision=s.precision)
        assert not report.violations, report.describe()
        assert report.valid, report.describe()
        assert not report.queue.unfinished, report.describe()

    @conformance("P32")
    async def test_every_added_message_is_delivered_at_least_once_unless_it_is_dead_lettered(
        self, s: Scenario
    ) -> None:
        """Producers, crashes, stalls and retries, then a drain: nothing lost or unexpected."""
        history = History(s.now)
        faults = Faults(stalls=s.requires_heartbeat, crashes=s.requires_heartbeat, releases=True)

        await run_workload(
            s, history, messages=scaled_count(200, minimum=40), faults=faults, producers=3, seed=32
        )

        report = check_history(history, lease_seconds=s.lease, precision=s.precision)
        assert report.queue.valid, report.describe()
        assert not report.queue.unfinished, report.describe()
        assert not report.violations, report.describe()

    @conformance("P33")
    async def test_without_faults_and_with_heartbeats_no_message_is_delivered_twice(
        self, s: Scenario
    ) -> None:
        """Work shorter than a lease, heartbeats every quarter lease, no crashes: no duplicates."""
        history = History(s.now)

        await run_workload(s, history, messages=scaled_count(200, minimum=40), seed=33)

        report = check_history(history, lease_seconds=s.lease, precision=s.precision)
        assert report.valid, report.describe()
        assert not report.violations, report.describe()
        assert not report.queue.duplicated, (
            f"{len(report.queue.duplicated)} message(s) delivered twice without any fault: "
            f"{sorted(report.queue.duplicated)[:5]}"
        )

    @conformance("P34")
    async def test_concurrent_adds_return_unique_ids_and_every_message_is_delivered(
        self, s: Scenario
    ) -> None:
        """Sixteen producers on sixteen handles add concurrently; one consumer drains them."""
        per_producer = scaled_count(500, minimum=20)
        handles = [await s.open() for _ in range(16)]
        rng = random.Random(34)

        async def produce(index: int) -> dict[str, bytes]:
            sent: dict[str, bytes] = {}
            done = 0
            while done < per_producer:
                size = min(per_producer - done, rng.randint(1, 25))
                bodies = [f"p{index} m{done + i}".encode() for i in range(size)]
                sent.update(zip(await s.add(bodies, handles[index]), bodies, strict=True))
                done += size
            return sent

        results = await asyncio.gather(*(produce(i) for i in range(16)))

        added: dict[str, bytes] = {}
        for sent in results:
            clash = added.keys() & sent.keys()
            assert not clash, f"concurrent adds returned the same id(s) {sorted(clash)[:5]}"
            added.update(sent)
        assert len(added) == 16 * per_producer
        got = await s.receive_n(s.queue, s.consumer("drain"), len(added), batch=100)
        assert {d.message_id: d.body for d in got} == added, "deliveries differ from the adds"
        for start in range(0, len(got), 100):
            assert await s.queue.ack(got[start : start + 100]) == []

    @conformance("P36")
    async def test_storage_stays_bounded_over_many_add_receive_ack_cycles(
        self, s: Scenario
    ) -> None:
        """Thousands of completed messages leave no trace in the backend's storage."""
        s.require_hook(MeasuresStorage, "storage_size")
        assert isinstance(s.harness, MeasuresStorage)
        consumer = s.consumer("cycler")
        batch = 50

        async def cycle(times: int) -> None:
            for _ in range(times):
                await s.add([b"x" * 64] * batch)
                got = await s.receive_n(s.queue, consumer, batch)
                assert await s.queue.ack(got) == []

        await cycle(4)
        baseline = await s.harness.storage_size(s.queue)
        rounds = scaled_count(10_000, minimum=1_000) // batch
        await cycle(rounds)
        after = await s.harness.storage_size(s.queue)

        assert after <= 2 * baseline + 64, (
            f"storage grew from {baseline} to {after} over {rounds * batch} completed messages"
        )
