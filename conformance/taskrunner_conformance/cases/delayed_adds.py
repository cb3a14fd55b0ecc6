"""Delayed adds of the Scheduling part: due times at their edges, counts (X40, X41).

Due times are probed at their edges with `taskrunner_conformance.edges`, exactly as
release delays are (X15): not before ``due - p``, and after ``due + p``. ``due_at`` is
an instant on the backend's wall clock; the suite reads the harness's fake clock, or
the machine's clock on real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any

from taskrunner.queue import AddRequest, Delivery, Queue

from ..edges import Edges, Mark, Spec, Subject, Wording, check_edges, conclusively, settle_task
from ..scenario import ConformanceBase, Scenario, conformance
from .scheduling_calls import add_requests, added_id, ids_of, receive_all, reclaim_all

__all__ = ["DelayedAddCases"]


# -- delayed adds: the edge trial ---------------------------------------------------------


class _DueTrial:
    """Messages added with a delay (``how``: ``delay``, ``due_at``, ``past``); probed by receive.

    Reclaim must never return a delayed message; a due one comes with count 1.
    """

    wording = Wording("was delivered", "was still not delivered by receive", "time since its add")

    def __init__(self, s: Scenario, edges: Edges, adder: Queue, prober: Queue) -> None:
        self.s = s
        self.edges = edges
        self.adder = adder
        self.part = s.require_scheduling("delayed_add", queue=adder)
        self.prober = prober
        self.receiver = s.consumer("receiver")
        self.reclaimer = s.consumer("reclaimer")
        self.bodies: dict[str, bytes] = {}

    async def make(self, spec: Spec) -> Subject:
        s = self.s
        body = f"{spec.how} {spec.edge:g} #{len(self.bodies)}".encode()
        if spec.how == "delay":
            added, mark = await self.edges.timed(
                add_requests(self.part, [AddRequest(body=body, delay_seconds=spec.edge)])
            )
        else:
            # The due instant is fixed when the wall clock is read, not when add runs.
            start = s.now()
            wall = s.wall()
            mark = Mark(start, s.now())
            due = wall - 3600.0 if spec.how == "past" else wall + spec.edge
            # A delay_seconds that due_at must replace: far off, so ignoring due_at shows.
            request = AddRequest(body=body, due_at=due, delay_seconds=100 * s.lease)
            added = await add_requests(self.part, [request])
        assert added[0].added, f"a delayed add added nothing: {added!r}"
        message_id = added[0].message_id
        assert message_id not in self.bodies, f"two delayed adds got one id {message_id}"
        self.bodies[message_id] = body
        return Subject(message_id, spec, mark)

    async def probe(self, pending: Sequence[Subject]) -> set[str]:
        s = self.s
        wanted = {x.key: x for x in pending}
        received = await receive_all(self.prober, self.receiver, s.lease)
        reclaimed = await reclaim_all(self.prober, self.reclaimer, s.lease)
        delayed = [d for d in reclaimed if d.message_id in self.bodies]
        assert not delayed, (
            f"reclaim returned delayed message(s) {ids_of(delayed)}: a delayed message is "
            "delivered by receive once due, never reclaimed"
        )
        for delivery in received:
            subject = wanted.get(delivery.message_id)
            assert subject is not None or delivery.message_id not in self.bodies, (
                f"message {delivery.message_id} was delivered twice"
            )
            if subject is None:
                continue
            assert delivery.delivery_count == 1, (
                f"{subject.spec.label} was first delivered with count {delivery.delivery_count}"
            )
            assert delivery.body == self.bodies[delivery.message_id], "the body changed"
        lost = await self.prober.ack(received)
        assert lost == [], f"acking freshly received message(s) failed: {ids_of(lost)}"
        return {d.message_id for d in received} & set(wanted)


class DelayedAddCases(ConformanceBase):
    """X40, X41."""

    @conformance("X40")
    async def test_delayed_message_is_not_delivered_before_its_due_time_and_is_ready_after_it(
        self, s: Scenario
    ) -> None:
        """delay_seconds and due_at, each probed just before and just after its due time.

        due_at replaces delay_seconds (the requests also carry a far delay); a due_at in
        the past and a delay of 0 are ready at once. On a fake clock the delays are
        0.25, 1, 2.7 s and fractions of the lease, far from time zero.
        """
        s.require_scheduling("delayed_add")
        edges = Edges(s)
        lease = s.lease
        if edges.exact:
            delays = [0.25, 1.0, 2.7, 0.37 * lease, 1.6 * lease]
            dues = [0.6 * lease, 1.3]
        else:
            delays = [0.25 * lease, 0.6 * lease]
            dues = [0.4 * lease]
        specs = [Spec(0.0, "a message added with delay_seconds=0", "delay", before=False)]
        specs.append(Spec(0.0, "a message added with due_at an hour ago", "past", before=False))
        specs += [Spec(d, f"a message added with delay_seconds={d:g}", "delay") for d in delays]
        specs += [Spec(d, f"a message added with due_at {d:g}s ahead", "due_at") for d in dues]

        async def open_trial() -> _DueTrial:
            namespace = s.other_namespace()
            return _DueTrial(s, edges, await s.open(namespace), await s.open(namespace))

        await check_edges(s, edges, open_trial, specs)

    @conformance("X40")
    async def test_blocking_receive_on_an_empty_queue_wakes_when_a_delayed_message_falls_due(
        self, s: Scenario
    ) -> None:
        """A receive waiting ten leases returns a delayed add soon after it is due, not before.

        Added before the receive started and while it was already waiting: the add must
        neither end the wait early (with the message or with nothing) nor leave the
        receive to its timeout, as a backend that computes its wake-up only when a wait
        starts (or only from release delays) does.
        """
        s.require_capability("blocking_receive")
        s.require_scheduling("delayed_add")
        edges = Edges(s)
        await edges.head_start()
        delay = 0.3 * s.lease
        before = edges.before(delay)
        assert before is not None, "the precision leaves no room below the delay"
        for when in ("before the receive started", "while the receive waited"):

            async def attempt(when: str = when) -> float | None:
                namespace = s.other_namespace()
                adder, waiter = await s.open(namespace), await s.open(namespace)
                part = s.require_scheduling("delayed_add", queue=adder)
                request = AddRequest(body=b"falls due", delay_seconds=delay)

                def wait_for_it() -> Coroutine[Any, Any, list[Delivery]]:
                    return waiter.receive(
                        s.consumer("waiting"),
                        max_messages=1,
                        wait_seconds=10 * s.lease,
                        lease_seconds=s.lease,
                    )

                if when.startswith("before"):
                    added, mark = await edges.timed(add_requests(part, [request]))
                    task, _ = await edges.started(wait_for_it())
                else:
                    task, _ = await edges.started(wait_for_it())
                    await s.advance(0.1 * s.lease)
                    added, mark = await edges.timed(add_requests(part, [request]))
                try:
                    assert added[0].added, f"a delayed add added nothing: {added!r}"
                    await edges.wait_until(mark.start + before)
                    low = s.now() - mark.end
                    returned = task.done()
                    high = s.now() - mark.start
                    if not edges.certainly_before(delay, high):
                        return edges.before_miss(delay, low, high)
                    assert not returned, (
                        f"a receive waiting on an empty queue, with a message added {when} "
                        f"with delay_seconds={delay:g}, {_outcome(task)} within {high:.4f}s "
                        "of the add"
                    )
                    await edges.wait_until(mark.end + edges.after(delay))
                    assert await edges.finished(task), (
                        f"a blocking receive did not wake within {s.grace:g}s of the due time "
                        f"of a message added {when} with delay_seconds={delay:g}"
                    )
                    got = task.result()
                    assert ids_of(got) == [added[0].message_id], (
                        f"the woken receive returned {ids_of(got)}, not [{added[0].message_id}]"
                    )
                    assert got[0].delivery_count == 1
                    assert await waiter.ack(got) == []
                    return edges.before_miss(delay, low, high)
                finally:
                    await settle_task(task, s.grace)

            await conclusively(edges, f"a receive woken by a delayed add {when}", attempt)

    @conformance("X40")
    async def test_due_delayed_message_is_delivered_like_any_other(self, s: Scenario) -> None:
        """Once due: count 1, its receipt heartbeats, a release redelivers it with count 2."""
        part = s.require_scheduling("delayed_add")
        delay = s.lease / 4
        message_id = await added_id(part, AddRequest(body=b"delayed", delay_seconds=delay))
        await s.advance(delay + s.margin)
        (first,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        assert (first.message_id, first.body, first.delivery_count) == (
            message_id,
            b"delayed",
            1,
        ), f"the due message came back as {first!r}"
        assert await s.queue.heartbeat([first]) == [], "heartbeat of a due delayed message"
        assert await s.queue.release([first]) == []
        (second,) = await s.receive_n(s.queue, s.consumer("b"), 1)
        assert second.delivery_count == 2, f"redelivered with count {second.delivery_count}"
        assert await s.queue.ack([first]) == [first], "the released receipt acted"
        assert await s.queue.ack([second]) == []
        assert await s.queue.len() == 0

    @conformance("X41")
    async def test_delayed_message_counts_as_delayed_in_stats_and_in_len_until_it_is_due(
        self, s: Scenario
    ) -> None:
        """Two by delay_seconds, one by due_at, two plain: counted apart, read by another handle.

        When the shorter delay is over, its message is ready before any receive.
        """
        part = s.require_scheduling("delayed_add")
        other = await s.open()
        short, long = s.lease / 4, 10 * s.lease
        requests = [
            AddRequest(body=b"short", delay_seconds=short),
            AddRequest(body=b"plain"),
            AddRequest(body=b"long", delay_seconds=long),
            AddRequest(body=b"due", due_at=s.wall() + long),
            AddRequest(body=b"plain too", delay_seconds=0),
        ]
        added = await add_requests(part, requests)
        assert all(a.added for a in added), f"plain and delayed adds added nothing: {added}"

        stats = await other.stats()
        counts = (stats.ready, stats.delayed, stats.in_flight)
        assert counts == (2, 3, 0), (
            f"2 plain and 3 delayed messages: stats say ready, delayed, in flight = {counts}"
        )
        assert await other.len() == 5, "len counts delayed messages"

        await s.advance(short + s.margin)
        stats = await other.stats()
        counts = (stats.ready, stats.delayed, stats.in_flight)
        assert counts == (3, 2, 0), f"after the short delay: {counts}, not (3, 2, 0)"
        got = await s.receive_n(s.queue, s.consumer("a"), 3)
        assert sorted(d.body for d in got) == [b"plain", b"plain too", b"short"]
        stats = await other.stats()
        assert (stats.ready, stats.delayed, stats.in_flight) == (0, 2, 3)
        assert await other.len() == 5
        assert await s.queue.ack(got) == []
        assert await other.len() == 2, "len after acking the three due messages"

    @conformance("X41")
    async def test_delayed_and_plain_adds_draw_ids_from_one_space(self, s: Scenario) -> None:
        """Add and add_requests interleaved on two handles: every id distinct, kept by receive."""
        part = s.require_scheduling("delayed_add")
        other = await s.open()
        other_part = s.require_scheduling("delayed_add", queue=other)
        delay = s.lease / 4
        ids: dict[str, bytes] = {}
        for round_ in range(3):
            for body, message_id in zip(
                [f"plain {round_}".encode(), f"plain' {round_}".encode()],
                await s.add([f"plain {round_}".encode(), f"plain' {round_}".encode()], other),
                strict=True,
            ):
                ids.setdefault(message_id, body)
            for handle_part in (part, other_part):
                request = AddRequest(body=f"delayed {round_} {id(handle_part)}".encode())
                for r in (
                    request,
                    AddRequest(body=request.body + b" later", delay_seconds=delay),
                ):
                    message_id = await added_id(handle_part, r)
                    assert message_id not in ids, (
                        f"id {message_id} was issued to {ids[message_id]!r} and to {r.body!r}"
                    )
                    ids[message_id] = r.body
        assert len(ids) == 18, f"18 adds gave {len(ids)} distinct ids"
        await s.advance(delay + s.margin)
        got = await s.receive_n(s.queue, s.consumer("a"), len(ids))
        assert {d.message_id: d.body for d in got} == ids, "ids and bodies came back mixed up"
        assert all(d.delivery_count == 1 for d in got)
        assert await s.queue.ack(got) == []


def _outcome(task: asyncio.Task[list[Delivery]]) -> str:
    if task.cancelled():
        return "was cancelled"
    error = task.exception()
    if error is not None:
        return f"raised {error!r}"
    return f"returned {ids_of(task.result())}"
