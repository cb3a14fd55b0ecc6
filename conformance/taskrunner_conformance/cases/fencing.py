"""Fencing: a receipt of any earlier lease is reported lost and changes nothing (X20-X24).

The contract's rule, from the `taskrunner.queue.Queue` docstring: "stale" receipts are
those of any earlier lease of the message (before a reclaim by another consumer or by
the same one, before a release, redelivered or not, or older by several leases), and
heartbeat, ack, release and dead_letter holding one report the delivery lost and
change nothing. This module checks that rule as a fixed matrix, one test per
operation and kind of stale receipt, so the verdict never depends on the random
state machine (P40) happening upon the right sequence.

"Changes nothing" is checked concretely after the stale call:

* `len` and the counts of `stats` (ready, delayed, in flight, dead) are as before, and
  no dead letter appeared (with `Queue.admin`: `list_dead_letters` is still empty);
* with a current holder: nobody else receives or reclaims the message while that
  lease is live, and the holder can still heartbeat and ack it; after a stale
  heartbeat (when time can be moved), the current lease still lapses one lease after
  it was granted, so the stale heartbeat did not restart it;
* with the message released with a delay and not yet redelivered: nobody gets it
  before the delay, and after the delay it comes back with exactly its delivery
  count + 1.

Mixed batches (X24) hold current and stale deliveries of one and of several messages:
exactly the stale ones are returned, and the current ones are acted on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from taskrunner.queue import Delivery, Queue

from ..scenario import ConformanceBase, Scenario, conformance
from ..settings import TIME_SCALE_ENV

__all__ = [
    "KINDS",
    "OPS",
    "Epochs",
    "FencingCases",
    "Op",
    "QueueState",
    "StaleKind",
    "lease_op",
    "queue_state",
]

Op = Literal["heartbeat", "ack", "release", "dead_letter"]

# Each lease operation and the property that names its fencing.
OPS: dict[Op, str] = {"heartbeat": "X20", "ack": "X21", "release": "X22", "dead_letter": "X23"}

STALE_REASON = "stale receipt"


async def lease_op(queue: Queue, op: Op, deliveries: Sequence[Delivery]) -> list[Delivery]:
    """Call `op` on `queue` with `deliveries` (release with no delay); return what it reports."""
    if op == "heartbeat":
        return await queue.heartbeat(deliveries)
    if op == "ack":
        return await queue.ack(deliveries)
    if op == "release":
        return await queue.release(deliveries, delay_seconds=0)
    return await queue.dead_letter(deliveries, reason=STALE_REASON)


class QueueState(NamedTuple):
    """What a caller can see of a queue without taking anything from it."""

    length: int
    ready: int
    delayed: int
    in_flight: int
    dead: int
    # (original id, delivery count, reason) of every dead letter; None without admin.
    dead_letters: tuple[tuple[str, int, str], ...] | None


async def queue_state(queue: Queue) -> QueueState:
    """`len`, the counts of `stats` and, with `Queue.admin`, the dead letters."""
    stats = await queue.stats()
    letters = None
    if queue.admin is not None:
        letters = tuple(
            (d.original_id, d.delivery_count, d.reason)
            for d in await queue.admin.list_dead_letters(limit=1000)
        )
    return QueueState(
        length=await queue.len(),
        ready=stats.ready,
        delayed=stats.delayed,
        in_flight=stats.in_flight,
        dead=stats.dead,
        dead_letters=letters,
    )


@dataclass(frozen=True, slots=True)
class Epochs:
    """A message with a stale receipt, and its current lease or pending redelivery.

    Attributes:
        message_id: The message.
        stale: A delivery holding a receipt of an earlier lease.
        holder: The handle the current lease was granted through; None when the
            message was released with a delay and is not delivered yet.
        current: The current lease's delivery; None together with `holder`.
        delay: The release delay still running (seconds) when `holder` is None.
        released_at: When it was released (`Scenario.now`), when `holder` is None.
    """

    message_id: str
    stale: Delivery
    holder: Queue | None = None
    current: Delivery | None = None
    delay: float = 0.0
    released_at: float = 0.0


@dataclass(frozen=True, slots=True)
class StaleKind:
    """One way for a receipt to become stale.

    Attributes:
        slug: The kind as words of a test name.
        phrase: The kind as words of a failure message.
        needs_lapse: Whether building it lets a lease lapse (requires_heartbeat).
        build: Makes the message and its receipts.
        properties: Existing properties this kind also checks, by operation.
    """

    slug: str
    phrase: str
    needs_lapse: bool
    build: Callable[[Scenario], Awaitable[Epochs]]
    properties: Callable[[Op], tuple[str, ...]]


async def _reclaimed_by_another(s: Scenario) -> Epochs:
    (message_id,) = await s.add([b"reclaimed by another consumer"])
    (old,) = await s.receive_n(s.queue, s.consumer("old"), 1)
    await s.lapse(s.queue, [old])
    holder = await s.open()
    (current,) = await s.reclaim_ids(holder, s.consumer("new"), {message_id})
    return Epochs(message_id, old, holder, current)


async def _reclaimed_by_the_same(s: Scenario) -> Epochs:
    (message_id,) = await s.add([b"reclaimed by the same consumer"])
    consumer = s.consumer("same")
    (old,) = await s.receive_n(s.queue, consumer, 1)
    await s.lapse(s.queue, [old])
    (current,) = await s.reclaim_ids(s.queue, consumer, {message_id})
    return Epochs(message_id, old, s.queue, current)


async def _released_not_redelivered(s: Scenario) -> Epochs:
    (message_id,) = await s.add([b"released, waiting out its delay"])
    (old,) = await s.receive_n(s.queue, s.consumer("same"), 1)
    # The harness's lease: long enough for the dozen calls checked before it ends (a
    # lease is sized for a few round trips on a loaded machine); see check_stale.
    delay = s.lease
    assert await s.queue.release([old], delay_seconds=delay) == []
    return Epochs(message_id, old, delay=delay, released_at=s.now())


async def _released_and_redelivered(s: Scenario) -> Epochs:
    (message_id,) = await s.add([b"released and redelivered"])
    consumer = s.consumer("same")
    (old,) = await s.receive_n(s.queue, consumer, 1)
    assert await s.queue.release([old]) == []
    (current,) = await s.receive_n(s.queue, consumer, 1)
    return Epochs(message_id, old, s.queue, current)


async def _two_releases_older(s: Scenario) -> Epochs:
    (message_id,) = await s.add([b"released twice"])
    consumer = s.consumer("same")
    (oldest,) = await s.receive_n(s.queue, consumer, 1)
    assert await s.queue.release([oldest]) == []
    (middle,) = await s.receive_n(s.queue, consumer, 1)
    assert await s.queue.release([middle]) == []
    (current,) = await s.receive_n(s.queue, consumer, 1)
    return Epochs(message_id, oldest, s.queue, current)


async def _two_reclaims_older(s: Scenario) -> Epochs:
    # The oldest and the current lease have the same owner, another one in between.
    (message_id,) = await s.add([b"reclaimed twice"])
    consumer = s.consumer("same")
    (oldest,) = await s.receive_n(s.queue, consumer, 1)
    await s.lapse(s.queue, [oldest])
    between = await s.open()
    (middle,) = await s.reclaim_ids(between, s.consumer("between"), {message_id})
    await s.lapse(between, [middle])
    (current,) = await s.reclaim_ids(s.queue, consumer, {message_id})
    return Epochs(message_id, oldest, s.queue, current)


def _after_reclaim_by_another(op: Op) -> tuple[str, ...]:
    return {"heartbeat": ("P16",), "ack": ("P12",)}.get(op, ())


KINDS: tuple[StaleKind, ...] = (
    StaleKind(
        "from_before_a_reclaim_by_another_consumer",
        "from before a reclaim by another consumer",
        True,
        _reclaimed_by_another,
        _after_reclaim_by_another,
    ),
    StaleKind(
        "from_before_a_reclaim_by_the_same_consumer",
        "from before a reclaim by the same consumer",
        True,
        _reclaimed_by_the_same,
        lambda op: ("P17",),
    ),
    StaleKind(
        "from_before_a_release_not_yet_redelivered",
        "from before a release, not yet redelivered",
        False,
        _released_not_redelivered,
        lambda op: ("X7",),
    ),
    StaleKind(
        "from_before_a_release_and_redelivery_to_the_same_consumer",
        "from before a release and redelivery to the same consumer",
        False,
        _released_and_redelivered,
        lambda op: ("X7",),
    ),
    StaleKind(
        "older_by_two_releases",
        "older by two releases (received, released, redelivered, twice)",
        False,
        _two_releases_older,
        lambda op: ("X7",),
    ),
    StaleKind(
        "older_by_two_reclaims",
        "older by two reclaims (the same consumer again, another one in between)",
        True,
        _two_reclaims_older,
        lambda op: ("P17",),
    ),
)


async def check_stale(s: Scenario, op: Op, kind: StaleKind) -> None:
    """Build `kind`, call `op` with its stale receipt, check it is reported and changed nothing."""
    if kind.needs_lapse:
        s.require_heartbeat()
    epochs = await kind.build(s)
    where = f"a stale {op} of a receipt {kind.phrase}"
    # Only a stale heartbeat could plausibly restart the current lease; check that it
    # did not wherever time can be moved by hand (an age_lease hook sets idle times,
    # so it would hide a restart).
    check_restart = (
        op == "heartbeat"
        and epochs.current is not None
        and s.requires_heartbeat
        and s.time_mode != "age"
    )
    other = await s.open()
    before = await queue_state(s.queue)
    assert before.dead_letters in (None, ()), f"dead letters before the stale call: {before}"
    if check_restart:
        await s.advance(s.live_age)

    try:
        reported = await lease_op(s.queue, op, [epochs.stale])

        assert reported == [epochs.stale], (
            f"{where} returned {reported}; expected the delivery reported lost"
        )
        after = await queue_state(s.queue)
        assert after == before, f"{where} changed the queue: before {before}, after {after}"
        if epochs.current is None:
            for handle, consumer in (
                (s.queue, epochs.stale.receipt.consumer),
                (other, s.consumer("b")),
            ):
                await s.nothing_for(handle, consumer, {epochs.message_id})
    except AssertionError as exc:
        # On real time, a machine too slow to make these calls within the delay would
        # see the message come due; say so instead of blaming the backend.
        if epochs.current is None and s.now() - epochs.released_at >= epochs.delay - s.precision:
            raise AssertionError(
                f"inconclusive: the checks after the release took longer than its "
                f"{epochs.delay:g}s delay; raise {TIME_SCALE_ENV}"
            ) from exc
        raise
    if epochs.current is None:
        await _check_delay_untouched(s, epochs, other, where)
    elif check_restart:
        await _check_lease_not_restarted(s, epochs, other, where)
    else:
        await _check_holder_untouched(s, epochs, other, where)
    assert await s.queue.len() == 0, f"after {where}, the message was left on the queue"
    s.boundary()  # one cell of the matrix: this operation, this kind of stale receipt


async def _check_holder_untouched(s: Scenario, epochs: Epochs, other: Queue, where: str) -> None:
    assert epochs.holder is not None
    assert epochs.current is not None
    await s.nothing_for(other, s.consumer("third"), {epochs.message_id})
    assert await epochs.holder.heartbeat([epochs.current]) == [], (
        f"after {where}, the current holder's heartbeat reported its lease lost"
    )
    assert await epochs.holder.ack([epochs.current]) == [], (
        f"after {where}, the current holder could not ack"
    )


async def _check_lease_not_restarted(s: Scenario, epochs: Epochs, other: Queue, where: str) -> None:
    assert epochs.current is not None
    # The current lease is live_age old: still live.
    await s.nothing_for(other, s.consumer("third"), {epochs.message_id})
    # Now lapse_age old counted from its grant, but much younger counted from the
    # stale heartbeat: only a heartbeat that acted would keep it.
    await s.advance(s.lapse_age - s.live_age)
    try:
        got = await s.reclaim_ids(other, s.consumer("rescuer"), {epochs.message_id})
    except AssertionError as exc:
        raise AssertionError(
            f"after {where}, the current lease did not lapse one lease after it was "
            "granted: the stale heartbeat restarted it or took the message"
        ) from exc
    (again,) = [d for d in got if d.message_id == epochs.message_id]
    assert again.delivery_count == epochs.current.delivery_count + 1, (
        f"after {where}, the lapsed message was reclaimed with count {again.delivery_count}, "
        f"not {epochs.current.delivery_count + 1}"
    )
    assert await other.ack(got) == []


async def _check_delay_untouched(s: Scenario, epochs: Epochs, other: Queue, where: str) -> None:
    await s.advance(epochs.delay + s.margin)
    (back,) = await s.receive_n(other, s.consumer("later"), 1)
    assert back.message_id == epochs.message_id
    expected = epochs.stale.delivery_count + 1
    assert back.delivery_count == expected, (
        f"after {where}, the message came back with count {back.delivery_count}, not {expected}"
    )
    assert await other.ack([back]) == []


def _matrix_test(op: Op, kind: StaleKind) -> Callable[[FencingCases], None]:
    async def case(self: FencingCases, s: Scenario) -> None:
        await check_stale(s, op, kind)

    restart = (
        " A stale heartbeat must not restart the current lease either." if op == "heartbeat" else ""
    )
    what = (
        "nobody gets the message before its delay, which then brings it back with count + 1"
        if kind.slug == "from_before_a_release_not_yet_redelivered"
        else "nobody else gets the message while the current lease lives, and its holder "
        "still heartbeats and acks it"
    )
    case.__name__ = f"test_stale_{op}_{kind.slug}_is_reported_lost_and_changes_nothing"
    case.__qualname__ = f"FencingCases.{case.__name__}"
    case.__doc__ = (
        f"A {op} with a receipt {kind.phrase} returns it as lost; len, stats and dead "
        f"letters stay as they were, {what}.{restart}"
    )
    return conformance(OPS[op], *kind.properties(op))(case)


class FencingCases(ConformanceBase):
    """X20-X24: the fencing matrix (generated below) and mixed batches."""

    @conformance("X24")
    async def test_mixed_heartbeat_batch_reports_exactly_the_stale_deliveries_and_acts_on_the_current_ones(  # noqa: E501 - reads as a sentence
        self, s: Scenario
    ) -> None:
        """Stale receipts are reported; current leases restart, the stale one's holder lapses."""
        await check_mixed_batch(s, "heartbeat")

    @conformance("X24")
    async def test_mixed_ack_batch_reports_exactly_the_stale_deliveries_and_acts_on_the_current_ones(  # noqa: E501 - reads as a sentence
        self, s: Scenario
    ) -> None:
        """Stale receipts are reported; the current ones are completed, once."""
        await check_mixed_batch(s, "ack")

    @conformance("X24")
    async def test_mixed_release_batch_reports_exactly_the_stale_deliveries_and_acts_on_the_current_ones(  # noqa: E501 - reads as a sentence
        self, s: Scenario
    ) -> None:
        """Stale receipts are reported; the current ones are released, once, with count + 1."""
        await check_mixed_batch(s, "release")

    @conformance("X24")
    async def test_mixed_dead_letter_batch_reports_exactly_the_stale_deliveries_and_acts_on_the_current_ones(  # noqa: E501 - reads as a sentence
        self, s: Scenario
    ) -> None:
        """Stale receipts are reported; the current ones become dead letters, once."""
        await check_mixed_batch(s, "dead_letter")


for _op in OPS:
    for _kind in KINDS:
        _test = _matrix_test(_op, _kind)
        setattr(FencingCases, _test.__name__, _test)
del _op, _kind, _test


async def check_mixed_batch(s: Scenario, op: Op) -> None:
    """One batch: x's stale and current receipts, y's current one, z's stale one.

    x was received, released and received again by consumer a; y is held by a since
    its first delivery; z was received by a, released and received by b on another
    handle. The batch is ``[stale x, current y, stale z, current x]``: a stale
    delivery first (a backend that stops at the first lost one fails), the current
    and the stale receipt of one message, and a stale receipt whose message someone
    else holds.
    """
    x, y, z = await s.add([b"x: stale and current", b"y: current", b"z: stale, held by b"])
    queue = s.queue
    a = s.consumer("a")
    first = {d.message_id: d for d in await s.receive_n(queue, a, 3)}
    assert await queue.release([first[x]]) == []
    (x_now,) = await s.receive_n(queue, a, 1)
    assert x_now.message_id == x
    other = await s.open()
    assert await queue.release([first[z]]) == []
    (z_now,) = await s.receive_n(other, s.consumer("b"), 1)
    assert z_now.message_id == z
    x_old, y_now, z_old = first[x], first[y], first[z]
    labels = {x_old: "stale x", y_now: "current y", z_old: "stale z", x_now: "current x"}
    batch = [x_old, y_now, z_old, x_now]
    restarting = op == "heartbeat" and s.requires_heartbeat
    if restarting:
        # Lapsed but not reclaimed: still owned, so a heartbeat with a current receipt
        # restarts it; a stale one must leave z's lease lapsed.
        await s.lapse(queue, [x_now, y_now, z_now])

    reported = await lease_op(queue, op, batch)

    named = [labels.get(d, repr(d)) for d in reported]
    assert Counter(reported) == Counter([x_old, z_old]), (
        f"{op}([stale x, current y, stale z, current x]) returned {named}; "
        "expected exactly stale x and stale z"
    )
    third = await s.open()
    rescuer = s.consumer("c")
    if op == "heartbeat":
        if restarting:
            taken = await s.reclaim_ids(third, rescuer, {z})
            restarted = {d.message_id for d in taken} & {x, y}
            assert not restarted, (
                f"the heartbeat batch did not restart current lease(s) {sorted(restarted)}"
            )
            assert await third.ack(taken) == []
            assert await other.ack([z_now]) == [z_now], "z's lapsed lease survived a reclaim"
        else:
            assert await other.ack([z_now]) == []
        assert await queue.ack([x_now, y_now]) == [], "the heartbeat batch lost current leases"
    elif op == "ack":
        state = await queue_state(queue)
        assert (state.length, state.in_flight) == (1, 1), (
            f"ack batch: expected x and y completed and z still held, got {state}"
        )
        assert await queue.ack([x_now, y_now]) == [x_now, y_now], (
            "current x and y were not completed by the ack batch"
        )
        assert await other.heartbeat([z_now]) == [], "the ack batch took z from its holder"
        assert await other.ack([z_now]) == []
    elif op == "release":
        state = await queue_state(queue)
        assert (state.length, state.ready, state.in_flight) == (3, 2, 1), (
            f"release batch: expected x and y ready again, z still held, got {state}"
        )
        got = await s.receive_n(third, rescuer, 2)
        counts = {d.message_id: d.delivery_count for d in got}
        assert counts == {x: 3, y: 2}, (
            f"after the release batch, receive returned {counts}; expected x with count 3 "
            "and y with count 2"
        )
        await s.nothing_for(third, s.consumer("d"), {x, y, z})
        assert await other.ack([z_now]) == [], "the release batch took z from its holder"
        assert await third.ack(got) == []
    else:
        state = await queue_state(queue)
        assert (state.length, state.in_flight, state.dead) == (1, 1, 2), (
            f"dead_letter batch: expected x and y dead, z still held, got {state}"
        )
        if state.dead_letters is not None:
            assert sorted(state.dead_letters) == sorted(
                [(x, 2, STALE_REASON), (y, 1, STALE_REASON)]
            ), f"dead letters after the batch: {state.dead_letters}"
        await s.nothing_for(third, rescuer, {x, y})
        assert await other.ack([z_now]) == [], "the dead_letter batch took z from its holder"
    assert await queue.len() == 0, f"after the {op} batch, messages were left on the queue"
