"""The optional MessageLookup part: the state of messages by id (X70-X75).

Every bullet of the `taskrunner.queue.MessageLookup` docstring has a test that reads
the same. The tests need ``capabilities.lookup`` (skipped with the reason otherwise)
and fail when it is claimed while `taskrunner.queue.lookup_of` returns None; the
delayed-add edges also need ``capabilities.delayed_add``.

Lookups change nothing, so the due times of delayed adds and release delays are probed
with `taskrunner_conformance.edges` by looking the messages up: ``delayed`` below
``due - p``, ``ready`` above ``due + p``, whether or not anything received meanwhile.
Every answer is checked whole: the id asked, the state, the delivery count, and the
optional fields where the backend gives them (a body must be the message's, a holder
the consumer holding the lease, times plausible).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from taskrunner.queue import (
    AddRequest,
    MessageLookup,
    MessageState,
    Queue,
    ResultWrite,
    scheduling_of,
)

from ..edges import Edges, Mark, Spec, Subject, Wording, check_edges
from ..scenario import ConformanceBase, Scenario, conformance
from .result_calls import closed_result_calls, refused_when_closed
from .scheduling_calls import add_requests

__all__ = ["LookupCases", "lookup"]

# Seconds a wall-clock time a backend reports may be off beyond its precision: times
# kept in whole milliseconds (a Redis stream id) are up to 1 ms early.
WALL_TOLERANCE = 0.002


async def lookup(part: MessageLookup, message_ids: Sequence[str]) -> list[MessageState | None]:
    """`part.lookup(message_ids)`, checked to answer each id, in order, with its own id."""
    got = await part.lookup(list(message_ids))
    assert isinstance(got, list), f"lookup returned {got!r}, not a list"
    assert len(got) == len(message_ids), (
        f"lookup of {len(message_ids)} id(s) returned {len(got)} answer(s)"
    )
    for asked, state in zip(message_ids, got, strict=True):
        if state is None:
            continue
        assert isinstance(state, MessageState), f"lookup({asked!r}) answered {state!r}"
        assert state.message_id == asked, (
            f"lookup({asked!r}) answered a state of message {state.message_id!r}"
        )
    return got


@dataclass(frozen=True, slots=True)
class Expect:
    """What one lookup must answer.

    Attributes:
        state: The state name.
        count: The delivery count.
        body: The message body (a returned body must equal it).
        consumer: For running: the holder.
    """

    state: str
    count: int
    body: bytes
    consumer: str | None = None


def _check(asked: str, got: MessageState | None, expect: Expect, when: str) -> MessageState:
    assert got is not None, f"{when}, lookup({asked!r}) answered None, not {expect.state}"
    found = (got.state, got.delivery_count)
    assert found == (expect.state, expect.count), (
        f"{when}, lookup({asked!r}) answered state {got.state!r} with delivery count "
        f"{got.delivery_count!r}, not {expect.state!r} with {expect.count}"
    )
    assert got.body is None or got.body == expect.body, (
        f"{when}, lookup({asked!r}) answered the body {got.body[:40]!r}, not the message's"
    )
    if expect.state == "running":
        assert got.consumer == expect.consumer, (
            f"{when}, lookup({asked!r}) named the holder {got.consumer!r}, not {expect.consumer!r}"
        )
        assert got.idle_seconds is None or (
            math.isfinite(got.idle_seconds) and got.idle_seconds >= 0
        ), f"{when}, lookup({asked!r}) answered idle_seconds={got.idle_seconds!r}"
    if expect.state == "dead":
        assert got.dead_at is None or math.isfinite(got.dead_at), (
            f"{when}, lookup({asked!r}) answered dead_at={got.dead_at!r}"
        )
    return got


async def _expect(part: MessageLookup, expected: dict[str, Expect | None], when: str) -> None:
    ids = list(expected)
    got = await lookup(part, ids)
    for asked, state in zip(ids, got, strict=True):
        want = expected[asked]
        if want is None:
            assert state is None, (
                f"{when}, lookup({asked!r}) answered state {state.state!r} (count "
                f"{state.delivery_count}), not None"
            )
        else:
            _check(asked, state, want, when)


class _DueTrial:
    """Messages made delayed by ``how``; probed by looking them up through another handle.

    ``how``: ``delay`` (added with delay_seconds ``edge``), ``due_at`` (added with due_at
    ``edge`` ahead and a far delay_seconds it replaces), ``release`` (added, received
    and released with delay ``edge``). Delayed until due with the count they had (0,
    or 1 after the release), then ready with it; a ``due_at`` returned must be the due
    instant.
    """

    wording = Wording("was ready", "was still delayed", "time since its add or release")

    def __init__(self, s: Scenario, edges: Edges, maker: Queue, reader: MessageLookup) -> None:
        self.s = s
        self.edges = edges
        self.maker = maker
        self.reader = reader
        self.consumer = s.consumer("releaser")
        self.expected: dict[str, Expect] = {}
        self.due: dict[str, tuple[float, float]] = {}

    async def make(self, spec: Spec) -> Subject:
        s, edges = self.s, self.edges
        body = f"{spec.how} {spec.edge:g} #{len(self.expected)}".encode()
        count = 0
        if spec.how == "release":
            (message_id,) = await s.add([body], self.maker)
            (held,) = await s.receive_n(self.maker, self.consumer, 1)
            assert held.message_id == message_id, "received another message than added"
            wall = s.wall()
            lost, mark = await edges.timed(self.maker.release([held], delay_seconds=spec.edge))
            assert lost == [], "release of a current delivery reported it lost"
            count = 1
        else:
            part = s.require_scheduling("delayed_add", queue=self.maker)
            start = s.now()
            wall = s.wall()
            if spec.how == "delay":
                request = AddRequest(body=body, delay_seconds=spec.edge)
            else:
                request = AddRequest(body=body, due_at=wall + spec.edge, delay_seconds=1e4)
            (added,) = await add_requests(part, [request])
            mark = Mark(start, s.now())
            assert added.added, f"a delayed add added nothing: {added!r}"
            message_id = added.message_id
        self.due[message_id] = (wall + spec.edge, s.wall() + spec.edge)
        self.expected[message_id] = Expect("delayed", count, body)
        return Subject(message_id, spec, mark)

    async def probe(self, pending: Sequence[Subject]) -> set[str]:
        keys = [x.key for x in pending]
        ready = set()
        p = self.s.precision + self.edges.inside(self.s.lease) + WALL_TOLERANCE
        for subject, state in zip(pending, await lookup(self.reader, keys), strict=True):
            want = self.expected[subject.key]
            label = subject.spec.label
            assert state is not None, f"{label} had no state (lookup answered None)"
            if state.state == "ready":
                _check(subject.key, state, Expect("ready", want.count, want.body), label)
                ready.add(subject.key)
                continue
            _check(subject.key, state, want, label)
            low, high = self.due[subject.key]
            assert state.due_at is None or low - p <= state.due_at <= high + p, (
                f"{label}: lookup answered due_at={state.due_at!r}, not within {p:g}s of "
                f"the due instant {low:.3f}..{high:.3f}"
            )
        return ready


def _near_misses(message_id: str) -> list[str]:
    """Ids a careless lookup might match to `message_id`: prefixes, case, range syntax."""
    head = message_id.split("-")[0]
    return [
        message_id.upper(),
        message_id.lower(),
        message_id[:-1],
        message_id + "0",
        "0" + message_id,
        "(" + message_id,
        message_id + " ",
        head,
        head + "-",
        message_id + "-0",
    ]


# Ids no backend issues; a lookup must answer None for each, never raise.
MALFORMED = [
    "",
    " ",
    "-",
    "+",
    "*",
    "$",
    ">",
    "0",
    "0-0",
    "-1",
    "1-1-1",
    "18446744073709551616-0",
    "not a message id",
    "\x00",
    "ü",
    "{tag}",
    "x" * 10_000,
]


class LookupCases(ConformanceBase):
    """X70-X75."""

    @conformance("X70")
    async def test_message_not_yet_delivered_is_ready_with_delivery_count_0(
        self, s: Scenario
    ) -> None:
        """Added by another handle (an empty body among them): ready, count 0, its own body.

        An added_at, where given, is the time of the add; with scheduling, a request
        without delay is ready too.
        """
        part = s.require_lookup()
        adder = await s.open()
        bodies = [b"", b"plain", bytes(range(256))]
        if s.time_mode == "clock":
            # A fake clock starts at 0 and stands still unless moved: move it before and
            # after the add, so an added_at computed with a wrong sign is seen.
            await s.advance(10.0)
        wall_before = s.wall()
        ids = await s.add(bodies, adder)
        wall_after = s.wall()
        if s.time_mode == "clock":
            await s.advance(10.0)
        expected: dict[str, Expect | None] = {
            message_id: Expect("ready", 0, body)
            for message_id, body in zip(ids, bodies, strict=True)
        }
        scheduling = scheduling_of(adder)
        if scheduling is not None:
            (added,) = await add_requests(scheduling, [AddRequest(body=b"requested")])
            expected[added.message_id] = Expect("ready", 0, b"requested")
        await _expect(part, expected, "after an add")
        tolerance = s.precision + WALL_TOLERANCE + (0 if s.time_mode == "clock" else 0.05)
        for message_id, state in zip(ids, await lookup(part, ids), strict=True):
            assert state is not None
            assert state.added_at is None or (
                wall_before - tolerance <= state.added_at <= wall_after + tolerance
            ), (
                f"lookup({message_id!r}) answered added_at={state.added_at!r}, not the time of "
                f"the add ({wall_before:.3f}..{wall_after:.3f})"
            )
        s.boundary(len(expected))

    @conformance("X71")
    async def test_delayed_message_is_delayed_until_it_is_due_then_ready(self, s: Scenario) -> None:
        """Delayed adds by delay_seconds and due_at, looked up just before and after due.

        Count 0 throughout; a due_at answered must be the due instant.
        """
        s.require_lookup()
        s.require_scheduling("delayed_add")
        edges = Edges(s)
        lease = s.lease
        if edges.exact:
            delays = [0.25, 2.7, 0.37 * lease, 1.6 * lease]
            dues = [0.6 * lease]
        else:
            delays = [0.25 * lease, 0.6 * lease]
            dues = [0.4 * lease]
        specs = [Spec(d, f"a message added with delay_seconds={d:g}", "delay") for d in delays]
        specs += [Spec(d, f"a message added with due_at {d:g}s ahead", "due_at") for d in dues]

        async def open_trial() -> _DueTrial:
            namespace = s.other_namespace()
            maker = await s.open(namespace)
            return _DueTrial(s, edges, maker, s.require_lookup(await s.open(namespace)))

        await check_edges(s, edges, open_trial, specs)

    @conformance("X72")
    async def test_leased_message_is_running_with_its_holder_and_delivery_count(
        self, s: Scenario
    ) -> None:
        """After receive and a heartbeat; lapsed but not reclaimed; reclaimed by another.

        Two consumers hold one message each. An idle_seconds, where given, is the time
        since the delivery or the last heartbeat.
        """
        part = s.require_lookup(await s.open())
        first, second = s.consumer("first"), s.consumer("second")
        bodies = dict(zip(await s.add([b"a", b"b"]), [b"a", b"b"], strict=True))
        start = s.now()
        (a,) = await s.receive_n(s.queue, first, 1)
        (b,) = await s.receive_n(s.queue, second, 1)
        assert {a.message_id, b.message_id} == set(bodies), "receive returned other messages"
        held_a = Expect("running", 1, bodies[a.message_id], first)
        await _expect(
            part,
            {
                a.message_id: held_a,
                b.message_id: Expect("running", 1, bodies[b.message_id], second),
            },
            "after receive",
        )

        idle = 0.3 * s.lease
        await s.advance(idle)
        (state,) = await lookup(part, [a.message_id])
        state = _check(a.message_id, state, held_a, f"{idle:g}s after the delivery")
        slack = s.precision + (0.0 if s.time_mode == "clock" else 0.05)
        if state.idle_seconds is not None:
            assert idle - slack <= state.idle_seconds <= s.now() - start + slack, (
                f"{idle:g}s after its delivery, lookup answered idle_seconds={state.idle_seconds:g}"
            )
        mark = s.now()
        assert await s.queue.heartbeat([a]) == [], "heartbeat of a live lease reported lost"
        (state,) = await lookup(part, [a.message_id])
        state = _check(a.message_id, state, held_a, "after a heartbeat")
        if state.idle_seconds is not None:
            assert state.idle_seconds <= s.now() - mark + slack, (
                f"right after a heartbeat, lookup answered idle_seconds={state.idle_seconds:g}"
            )
        s.boundary(2)

        if not s.requires_heartbeat:
            return
        await s.lapse(s.queue, [a])
        await _expect(part, {a.message_id: held_a}, "with its lease lapsed, not reclaimed")
        third = s.consumer("reclaimer")
        reclaimed = await s.reclaim_ids(s.queue, third, {a.message_id})
        (again,) = [d for d in reclaimed if d.message_id == a.message_id]
        assert again.delivery_count == 2, f"reclaimed with count {again.delivery_count}"
        await _expect(
            part,
            {a.message_id: Expect("running", 2, bodies[a.message_id], third)},
            "after a reclaim by another consumer",
        )
        s.boundary(2)
        others = [d for d in reclaimed if d.message_id != a.message_id]
        assert await s.queue.ack([again, *others]) == []

    @conformance("X73")
    async def test_released_message_is_delayed_or_ready_with_the_delivery_count_it_had(
        self, s: Scenario
    ) -> None:
        """Released without delay: ready with count 1; redelivered: running with count 2.

        Released again after a lapse and a reclaim (count 3): ready with count 3.
        """
        part = s.require_lookup(await s.open())
        (message_id,) = await s.add([b"released"])
        consumer = s.consumer("a")
        (held,) = await s.receive_n(s.queue, consumer, 1)
        assert await s.queue.release([held]) == []
        await _expect(part, {message_id: Expect("ready", 1, b"released")}, "after a release")
        (held,) = await s.receive_n(s.queue, consumer, 1)
        await _expect(
            part,
            {message_id: Expect("running", 2, b"released", consumer)},
            "after a redelivery",
        )
        if s.requires_heartbeat:
            await s.lapse(s.queue, [held])
            other = s.consumer("b")
            (held,) = await s.reclaim_ids(s.queue, other, {message_id})
            assert await s.queue.release([held]) == []
            await _expect(
                part,
                {message_id: Expect("ready", 3, b"released")},
                "after a release of a reclaimed delivery",
            )
        s.boundary(2)

    @conformance("X73")
    async def test_message_released_with_a_delay_is_delayed_until_it_is_due_then_ready(
        self, s: Scenario
    ) -> None:
        """Release delays of several lengths, looked up just before and after each ends.

        Count 1 throughout (it was delivered once); a due_at answered must be the due
        instant.
        """
        s.require_lookup()
        edges = Edges(s)
        lease = s.lease
        delays = [0.3, 0.45 * lease, 1.3 * lease] if edges.exact else [0.3 * lease, 0.5 * lease]
        specs = [Spec(d, f"a message released with delay_seconds={d:g}", "release") for d in delays]

        async def open_trial() -> _DueTrial:
            namespace = s.other_namespace()
            maker = await s.open(namespace)
            return _DueTrial(s, edges, maker, s.require_lookup(await s.open(namespace)))

        await check_edges(s, edges, open_trial, specs)

    @conformance("X74")
    async def test_dead_lettered_message_is_dead_under_its_original_id_with_its_reason(
        self, s: Scenario
    ) -> None:
        """At count 1 and at count 2, with a non-ASCII multi-line reason kept whole.

        With `Queue.admin`: once retried, the original id has no state and the new message
        is ready with count 0; once purged from the dead letters, none either.
        """
        part = s.require_lookup(await s.open())
        first, second, third = await s.add([b"first", b"second", b"third"])
        consumer = s.consumer("a")
        got = {d.message_id: d for d in await s.receive_n(s.queue, consumer, 3)}
        assert await s.queue.release([got[second]]) == []
        (again,) = await s.receive_n(s.queue, consumer, 1)
        assert again.message_id == second
        reason = "boom: ✗ «quoted»\nsecond line\ttab"
        wall_before = s.wall()
        assert await s.queue.dead_letter([got[first], again], reason=reason) == []
        assert await s.queue.dead_letter([got[third]], reason="other") == []
        wall_after = s.wall()
        expected: dict[str, Expect | None] = {
            first: Expect("dead", 1, b"first"),
            second: Expect("dead", 2, b"second"),
            third: Expect("dead", 1, b"third"),
        }
        await _expect(part, expected, "after dead_letter")
        tolerance = s.precision + WALL_TOLERANCE + (0 if s.time_mode == "clock" else 0.05)
        reasons = {first: reason, second: reason, third: "other"}
        for message_id, state in zip(expected, await lookup(part, list(expected)), strict=True):
            assert state is not None
            assert state.dead_reason == reasons[message_id], (
                f"lookup({message_id!r}) answered the reason {state.dead_reason!r}, not "
                f"{reasons[message_id]!r}"
            )
            assert state.dead_at is None or (
                wall_before - tolerance <= state.dead_at <= wall_after + tolerance
            ), f"lookup({message_id!r}) answered dead_at={state.dead_at!r}"
        s.boundary(3)

        admin = s.queue.admin
        if admin is None:
            return
        letters = {d.original_id: d for d in await admin.list_dead_letters(limit=1000)}
        assert set(letters) == {first, second, third}, f"dead letters: {sorted(letters)}"
        (new_id,) = await admin.retry_dead_letters([letters[first].message_id])
        assert await admin.purge_dead_letters([letters[second].message_id]) == 1
        await _expect(
            part,
            {
                first: None,
                second: None,
                third: Expect("dead", 1, b"third"),
                new_id: Expect("ready", 0, b"first"),
            },
            "after retrying the first dead letter and purging the second",
        )
        s.boundary(2)

    @conformance("X75")
    async def test_acked_cancelled_purged_or_unknown_message_has_no_state(
        self, s: Scenario
    ) -> None:
        """Acked; cancelled (with cancel); purged while ready, delayed or in flight (with admin).

        Dead letters survive a purge. Unknown ids: issued by another queue, near misses of
        real ids (prefixes, case, range syntax) and malformed ids answer None, never raise.
        """
        part = s.require_lookup(await s.open())
        acked, kept = await s.add([b"acked", b"kept"])
        consumer = s.consumer("a")
        got = {d.message_id: d for d in await s.receive_n(s.queue, consumer, 2)}
        assert await s.queue.ack([got[acked]]) == []
        expected: dict[str, Expect | None] = {
            acked: None,
            kept: Expect("running", 1, b"kept", consumer),
        }
        await _expect(part, expected, "after an ack")

        caps = s.capabilities
        scheduling = scheduling_of(s.queue)
        if caps.cancel and scheduling is not None:
            (ready,) = await s.add([b"to cancel"])
            cancelled = [ready]
            if caps.delayed_add:
                (delayed,) = await add_requests(
                    scheduling, [AddRequest(body=b"delayed", delay_seconds=10 * s.lease)]
                )
                cancelled.append(delayed.message_id)
            assert await scheduling.cancel(cancelled) == [True] * len(cancelled)
            expected.update(dict.fromkeys(cancelled))
            await _expect(part, expected, "after a cancel")

        issued = set(expected)
        elsewhere = await s.open(s.other_namespace())
        foreign = [i for i in await s.add([b"elsewhere"] * 4, elsewhere) if i not in issued]
        misses = [m for m in _near_misses(kept) + _near_misses(acked) if m not in issued]
        unknown = list(dict.fromkeys(foreign + misses + MALFORMED))
        got_unknown = await lookup(part, unknown)
        wrong = [
            f"{i[:40]!r} -> {st.state}" for i, st in zip(unknown, got_unknown, strict=True) if st
        ]
        assert not wrong, f"unknown and malformed ids had a state: {'; '.join(wrong)}"
        s.boundary(len(unknown))

        order = [kept, acked, kept, "not an id", kept]
        answers = await lookup(part, order)
        assert [a.state if a else None for a in answers] == [
            "running",
            None,
            "running",
            None,
            "running",
        ], f"lookup({order!r}) answered {answers!r}"
        assert await part.lookup([]) == [], "lookup([]) did not answer []"

        admin = s.queue.admin
        if admin is None:
            return
        ready_id, delayed_id, dead_id = await s.add([b"ready", b"released", b"dead"])
        taken = {d.message_id: d for d in await s.receive_n(s.queue, consumer, 3)}
        assert await s.queue.release([taken[ready_id]]) == []
        assert await s.queue.release([taken[delayed_id]], delay_seconds=10 * s.lease) == []
        assert await s.queue.dead_letter([taken[dead_id]], reason="stays") == []
        assert await admin.purge() == 3, "purge of a running, a ready and a delayed message"
        await _expect(
            part,
            {
                kept: None,
                ready_id: None,
                delayed_id: None,
                dead_id: Expect("dead", 1, b"dead"),
            },
            "after purge",
        )
        await admin.delete_queue()
        reused = s.require_lookup(await s.open())
        await _expect(reused, {dead_id: None, kept: None}, "after delete_queue")
        s.boundary(5)

    @conformance("X1")
    async def test_result_store_and_lookup_of_a_closed_handle_raise_queue_closed_error(
        self, s: Scenario
    ) -> None:
        """Every method, empty batches too; the data stays readable through another handle."""
        if not (s.capabilities.results or s.capabilities.lookup):
            s.require_capability("results")
        closing = await s.open()
        (message_id,) = await s.add([b"looked up"])
        calls: dict[str, Callable[[], Awaitable[object]]] = {}
        if s.capabilities.results:
            results = s.require_results(closing)
            await results.put_results(
                [ResultWrite(message_id="closed", body=b"kept", ttl_seconds=100 * s.lease)]
            )
            calls.update(closed_result_calls(results))
        if s.capabilities.lookup:
            part = s.require_lookup(closing)
            calls["lookup.lookup([])"] = lambda: part.lookup([])
            calls["lookup.lookup([id])"] = lambda: part.lookup([message_id])
        await closing.aclose()
        await refused_when_closed(calls, s.grace)
        if s.capabilities.results:
            (kept,) = await s.require_results().get_results(["closed"])
            assert kept == b"kept", "closing a handle lost a result"
        if s.capabilities.lookup:
            (state,) = await lookup(s.require_lookup(), [message_id])
            assert state is not None, "closing a handle lost a message"
            assert state.state == "ready", "closing a handle moved a message"
