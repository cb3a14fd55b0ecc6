"""The optional MessageBrowser part: paged listings of waiting and in-flight messages (X80-X84).

Every bullet of the `taskrunner.queue.MessageBrowser` docstring has a test that reads
the same. The tests need ``capabilities.browse`` (skipped with the reason otherwise)
and fail when it is claimed while `taskrunner.queue.browse_of` returns None.

A listing is read whole by paging with small limits, bounded (a listing that never
ends, or repeats a page, fails instead of looping). Each listed message is checked
against what the test did: its id, body and delivery count, and in flight its holder,
an idle time no longer than the time since its grant and the lease it was granted.
Cursors are the backend's own text, so the suite compares orders only through what
the contract fixes: a FIFO backend lists never-delivered messages in add order.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import pytest

from taskrunner.queue import (
    BROWSE_LIMIT,
    AddRequest,
    BrowsedMessage,
    BrowseState,
    Delivery,
    MessageBrowser,
    browse_takes_body_bytes,
    scheduling_of,
)

from ..scenario import ConformanceBase, Scenario, conformance
from .result_calls import refused_when_closed
from .scheduling_calls import add_requests

__all__ = ["BrowseCases", "browse_all"]


async def browse_page(
    part: MessageBrowser, state: BrowseState, after: str | None, limit: int
) -> list[BrowsedMessage]:
    """One page, checked to be a list of at most `limit` `BrowsedMessage`s."""
    page = await part.browse(state, after=after, limit=limit)
    assert isinstance(page, list), f"browse({state!r}) returned {page!r:.80}, not a list"
    assert len(page) <= limit, f"browse({state!r}, limit={limit}) returned {len(page)} messages"
    for item in page:
        assert isinstance(item, BrowsedMessage), f"browse({state!r}) listed {item!r:.80}"
        assert item.cursor, (
            f"browse({state!r}) listed message {item.message_id!r} with cursor {item.cursor!r}"
        )
    return page


async def browse_all(
    part: MessageBrowser,
    state: BrowseState,
    *,
    limit: int,
    most: int,
    between: Callable[[list[BrowsedMessage]], Awaitable[None]] | None = None,
) -> list[BrowsedMessage]:
    """The whole listing, paged `limit` at a time; fails past `most` messages.

    A page shorter than `limit` ends the listing; a page must start after the cursor
    passed (its first message is not the previous page's last). `between`, if given,
    is awaited with each full page before the next one is read (to move messages).
    """
    listed: list[BrowsedMessage] = []
    after: str | None = None
    while True:
        page = await browse_page(part, state, after, limit)
        if page and listed:
            assert page[0].cursor != listed[-1].cursor, (
                f"browse({state!r}, after={after!r}) listed the cursor it was given again"
            )
        listed.extend(page)
        assert len(listed) <= most, (
            f"browse({state!r}) listed more than the {most} message(s) there are: "
            f"{[m.message_id for m in listed[: most + 2]]}"
        )
        if len(page) < limit:
            return listed
        after = page[-1].cursor
        if between is not None:
            await between(page)


def _call(part: MessageBrowser, state: str, **options: Any) -> Callable[[], Awaitable[object]]:
    """A browse call with any `state` text (the invalid ones included)."""
    return lambda: part.browse(cast(BrowseState, state), **options)


def _ids(listed: Sequence[BrowsedMessage]) -> list[str]:
    return [m.message_id for m in listed]


def _no_duplicates(listed: Sequence[BrowsedMessage], state: str) -> None:
    ids = _ids(listed)
    twice = sorted({i for i in ids if ids.count(i) > 1})
    assert not twice, f"browse({state!r}) listed message(s) {twice} more than once"
    cursors = [m.cursor for m in listed]
    assert len(set(cursors)) == len(cursors), f"browse({state!r}) repeated a cursor"


def _check_waiting(m: BrowsedMessage, body: bytes, count: int, when: str) -> None:
    assert m.body == body, (
        f"{when}, browse('waiting') listed {m.message_id!r} with body {m.body[:40]!r}, "
        f"not {body[:40]!r}"
    )
    assert m.delivery_count == count, (
        f"{when}, browse('waiting') listed {m.message_id!r} with delivery count "
        f"{m.delivery_count}, not {count}"
    )
    assert m.consumer is None, (
        f"{when}, browse('waiting') listed {m.message_id!r} as held by {m.consumer!r}"
    )


def _stayed_once(listed: Sequence[BrowsedMessage], stayed: set[str], state: str, how: str) -> None:
    """Every message of `stayed` was listed exactly once (the moved ones any number of times)."""
    ids = _ids(listed)
    wrong = {i: ids.count(i) for i in sorted(stayed) if ids.count(i) != 1}
    assert not wrong, (
        f"paged by 4 while others were {how} between pages, browse({state!r}) listed "
        f"messages that stayed put this many times: {wrong}"
    )


class BrowseCases(ConformanceBase):
    """X80-X85."""

    @conformance("X80")
    async def test_waiting_messages_are_listed_once_each_in_cursor_order_across_pages(
        self, s: Scenario
    ) -> None:
        """23 added by another handle, paged by 5, by 1 and in one page of the cap.

        Each listing holds every waiting message once, with its body and count 0; the
        three agree on the order, and a FIFO backend's order is the add order. After
        3 are received and one of them released, the rest and the released one (count
        1) are listed, the other two are not.
        """
        part = s.require_browse()
        adder = await s.open()
        bodies = [b"", *(f"waiting {i}".encode() for i in range(21)), bytes(range(256))]
        ids = await s.add(bodies, adder)
        by_id = dict(zip(ids, bodies, strict=True))
        listings = {
            limit: await browse_all(part, "waiting", limit=limit, most=len(ids))
            for limit in (5, 1, BROWSE_LIMIT)
        }
        for limit, listed in listings.items():
            when = f"after 23 adds, paged by {limit}"
            _no_duplicates(listed, "waiting")
            assert set(_ids(listed)) == set(ids), (
                f"{when}, browse('waiting') missed {sorted(set(ids) - set(_ids(listed)))} "
                f"and listed unknown {sorted(set(_ids(listed)) - set(ids))}"
            )
            for m in listed:
                _check_waiting(m, by_id[m.message_id], 0, when)
        orders = {limit: _ids(listed) for limit, listed in listings.items()}
        assert orders[5] == orders[1] == orders[BROWSE_LIMIT], (
            "browse('waiting') listed another order with another page size"
        )
        if s.capabilities.ordering == "fifo":
            assert orders[5] == ids, "a FIFO backend listed waiting messages out of add order"
        s.boundary(3)

        consumer = s.consumer("holder")
        held = await s.receive_n(s.queue, consumer, 3)
        assert await s.queue.release(held[:1]) == [], "release of a current delivery lost"
        listed = await browse_all(part, "waiting", limit=4, most=len(ids))
        _no_duplicates(listed, "waiting")
        leased = {d.message_id for d in held[1:]}
        expected = set(ids) - leased
        assert set(_ids(listed)) == expected, (
            f"with {sorted(leased)} leased, browse('waiting') missed "
            f"{sorted(expected - set(_ids(listed)))} and listed "
            f"{sorted(set(_ids(listed)) - expected)}"
        )
        for m in listed:
            count = 1 if m.message_id == held[0].message_id else 0
            _check_waiting(m, by_id[m.message_id], count, "after a receive and a release")
        s.boundary(1)

    @conformance("X80")
    async def test_message_that_stays_put_is_listed_once_across_pages_while_others_move(
        self, s: Scenario
    ) -> None:
        """12 waiting, then the 12 in flight, paged by 4 (an exact multiple) while others move.

        Waiting: after the first page as many messages are received as it listed (on a
        FIFO backend those, the cursor's own included), after each later one one more.
        In flight: after each full page its first and its last (the cursor's) message
        are acked. Every message that never moved is listed exactly once: a backend
        paging by position, or losing its place when the cursor's message leaves the
        listing, misses some.
        """
        part = s.require_browse()
        count, limit = 12, 4
        ids = await s.add([f"put {i}".encode() for i in range(count)])
        held: dict[str, Delivery] = {}
        mover = s.consumer("mover")

        async def receive_some(page: list[BrowsedMessage]) -> None:
            got = await s.receive_n(s.queue, mover, 1 if held else len(page))
            held.update((d.message_id, d) for d in got)

        listed = await browse_all(part, "waiting", limit=limit, most=count, between=receive_some)
        _stayed_once(listed, set(ids) - set(held), "waiting", "received")

        rest = await s.receive_n(s.queue, s.consumer("holder"), count - len(held))
        held.update((d.message_id, d) for d in rest)
        acked: set[str] = set()

        async def ack_ends(page: list[BrowsedMessage]) -> None:
            ends = {page[0].message_id, page[-1].message_id} - acked
            assert await s.queue.ack([held[i] for i in ends]) == [], "ack of a held message lost"
            acked.update(ends)

        listed = await browse_all(part, "in_flight", limit=limit, most=count, between=ack_ends)
        _stayed_once(listed, set(ids) - acked, "in_flight", "acked")
        assert await s.queue.ack([held[i] for i in set(ids) - acked]) == []
        assert await s.queue.len() == 0

    @conformance("X80")
    async def test_waiting_listing_includes_messages_released_and_due(self, s: Scenario) -> None:
        """Released with half a lease of delay (with ``delayed_add``, also added with one).

        Listed once due, before any receive (or other call) could have moved them, with
        counts 1 and 0, and listed the same after a stats call (which may move them);
        not listed while the delay runs. A receive then gets both.
        """
        part = s.require_browse()
        ids = await s.add([b"released", b"held"])
        got = {d.message_id: d for d in await s.receive_n(s.queue, s.consumer("a"), 2)}
        released, held = got[ids[0]], got[ids[1]]
        delay = 0.5 * s.lease
        start = s.now()
        assert await s.queue.release([released], delay_seconds=delay) == []
        due = {released.message_id: (b"released", 1)}
        scheduling = scheduling_of(s.queue) if s.capabilities.delayed_add else None
        if scheduling is not None:
            request = AddRequest(body=b"added", delay_seconds=delay)
            (added,) = await add_requests(scheduling, [request])
            due[added.message_id] = (b"added", 0)
        early = await browse_all(part, "waiting", limit=2, most=len(due))
        if s.now() - start < delay - s.precision:
            assert not set(_ids(early)) & set(due), (
                f"browse('waiting') listed {sorted(set(_ids(early)) & set(due))} while their "
                f"delay of {delay:g}s ran"
            )
        await s.advance(delay + s.margin)
        waiting = await browse_all(part, "waiting", limit=2, most=len(due))
        _no_duplicates(waiting, "waiting")
        assert sorted(_ids(waiting)) == sorted(due), (
            f"{s.margin:g}s after their delay of {delay:g}s, browse('waiting') listed "
            f"{sorted(_ids(waiting))}, not the due {sorted(due)}"
        )
        for m in waiting:
            body, count = due[m.message_id]
            _check_waiting(m, body, count, "once due")
        # stats counts due messages as ready, and a backend may move them to do so.
        await s.queue.stats()
        moved = await browse_all(part, "waiting", limit=2, most=len(due))
        assert sorted(_ids(moved)) == sorted(due), (
            f"after a stats call, browse('waiting') listed {sorted(_ids(moved))}, not the "
            f"due {sorted(due)}"
        )
        s.boundary(len(due))
        again = await s.receive_n(s.queue, s.consumer("b"), len(due))
        assert sorted((d.message_id, d.delivery_count) for d in again) == sorted(
            (i, count + 1) for i, (_, count) in due.items()
        ), "the due messages were not received next, each with its count + 1"
        assert await s.queue.ack([*again, held]) == []

    @conformance("X81")
    async def test_in_flight_messages_are_listed_with_their_holder_delivery_count_and_body(
        self, s: Scenario
    ) -> None:
        """Two consumers hold 2 and 1 of 4 messages; then one lapses and is reclaimed.

        Paged by 2, each held message is listed once with its holder, count 1, body,
        an idle time within the time since its grant and the lease it was granted; the
        fourth is waiting, not in flight. Reclaimed by a third consumer: listed under
        it with count 2.
        """
        part = s.require_browse(await s.open())
        bodies = [b"f0", b"f1", b"f2", b"f3"]
        ids = await s.add(bodies)
        by_id = dict(zip(ids, bodies, strict=True))
        first, second = s.consumer("first"), s.consumer("second")
        start = s.now()
        held = await s.receive_n(s.queue, first, 2)
        held += await s.receive_n(s.queue, second, 1)
        owner = {d.message_id: first for d in held[:2]} | {held[2].message_id: second}
        await s.advance(0.2 * s.lease)
        listed = await browse_all(part, "in_flight", limit=2, most=len(ids))
        elapsed = s.now() - start
        _no_duplicates(listed, "in_flight")
        assert set(_ids(listed)) == set(owner), (
            f"browse('in_flight') listed {sorted(_ids(listed))}, not the held {sorted(owner)}"
        )
        slack = s.precision + (0.0 if s.time_mode == "clock" else 0.05)
        for m in listed:
            when = f"browse('in_flight') listed {m.message_id!r}"
            assert (m.consumer, m.delivery_count, m.body) == (
                owner[m.message_id],
                1,
                by_id[m.message_id],
            ), (
                f"{when} held by {m.consumer!r} with count {m.delivery_count} and body "
                f"{m.body[:40]!r}, not by {owner[m.message_id]!r} with count 1"
            )
            assert m.idle_seconds is None or (
                math.isfinite(m.idle_seconds) and 0 <= m.idle_seconds <= elapsed + slack
            ), f"{when} with idle_seconds={m.idle_seconds!r}, {elapsed:.3f}s after its grant"
            assert (
                m.lease_seconds is None or abs(m.lease_seconds - s.lease) <= 0.001 + s.precision
            ), f"{when} with lease_seconds={m.lease_seconds!r}, granted {s.lease:g}"
        waiting = await browse_all(part, "waiting", limit=2, most=len(ids))
        assert set(_ids(waiting)) == set(ids) - set(owner), (
            f"with 3 of 4 held, browse('waiting') listed {sorted(_ids(waiting))}"
        )
        s.boundary(3)

        if not s.requires_heartbeat:
            return
        target = held[2]
        await s.lapse(s.queue, [target])
        listed = await browse_all(part, "in_flight", limit=2, most=len(ids))
        lapsed = [m for m in listed if m.message_id == target.message_id]
        assert [(m.consumer, m.delivery_count) for m in lapsed] == [(second, 1)], (
            "with its lease lapsed, not reclaimed, browse('in_flight') listed "
            f"{[(m.consumer, m.delivery_count) for m in lapsed]}, not its holder with count 1"
        )
        third = s.consumer("reclaimer")
        reclaimed = await s.reclaim_ids(s.queue, third, {target.message_id})
        listed = await browse_all(part, "in_flight", limit=2, most=len(ids))
        again = [m for m in listed if m.message_id == target.message_id]
        assert [(m.consumer, m.delivery_count) for m in again] == [(third, 2)], (
            "after a reclaim by another consumer, browse('in_flight') listed "
            f"{[(m.consumer, m.delivery_count) for m in again]}, not {third!r} with count 2"
        )
        s.boundary(2)
        assert await s.queue.ack(reclaimed) == []

    @conformance("X82")
    async def test_browsing_never_changes_a_lease_a_delivery_count_or_what_receive_returns(
        self, s: Scenario
    ) -> None:
        """Both listings read many times around a held lease and two waiting messages.

        The holder's heartbeat still holds; stats read the same before and after; a
        receive then gets exactly the two waiting ones, each at count 1. With leases
        that lapse, a lease aged past its end while being browsed is still reclaimed
        (browsing did not reset its idle time), at count 2.
        """
        part = s.require_browse(await s.open())
        ids = await s.add([b"b0", b"b1", b"b2"])
        holder = s.consumer("holder")
        (held,) = await s.receive_n(s.queue, holder, 1)
        before = await s.queue.stats()
        for _ in range(3):
            await browse_all(part, "waiting", limit=1, most=len(ids))
            await browse_all(part, "in_flight", limit=1, most=len(ids))
        after = await s.queue.stats()
        assert (after.ready, after.in_flight, after.delayed, after.dead) == (
            before.ready,
            before.in_flight,
            before.delayed,
            before.dead,
        ), f"browsing changed the stats from {before!r} to {after!r}"
        assert await s.queue.heartbeat([held]) == [], "after browsing, a heartbeat lost its lease"
        other = s.consumer("other")
        got = await s.queue.receive(other, max_messages=10, wait_seconds=0, lease_seconds=s.lease)
        assert sorted((d.message_id, d.delivery_count) for d in got) == sorted(
            (i, 1) for i in ids if i != held.message_id
        ), (
            "after browsing, receive returned "
            f"{sorted((d.message_id, d.delivery_count) for d in got)}, not the 2 waiting at count 1"
        )
        s.boundary(2)
        assert await s.queue.ack(got) == []

        if not s.requires_heartbeat:
            return
        assert await s.queue.heartbeat([held]) == []
        await s.lapse(s.queue, [held])
        for _ in range(3):
            listed = await browse_all(part, "in_flight", limit=1, most=len(ids))
            assert [m.message_id for m in listed] == [held.message_id], (
                f"with one message held, browse('in_flight') listed {_ids(listed)}"
            )
        reclaimer = s.consumer("reclaimer")
        reclaimed = await s.reclaim_ids(s.queue, reclaimer, {held.message_id})
        (again,) = [d for d in reclaimed if d.message_id == held.message_id]
        assert again.delivery_count == 2, (
            f"a lapsed lease browsed three times was reclaimed with count {again.delivery_count}"
        )
        assert await s.queue.heartbeat([held]) == [held], (
            "the old holder's heartbeat held on after a reclaim"
        )
        s.boundary(1)
        assert await s.queue.ack(reclaimed) == []

    @conformance("X83")
    async def test_delayed_acked_and_dead_lettered_messages_are_not_listed(
        self, s: Scenario
    ) -> None:
        """Of 5 received: one acked, one dead-lettered, one released with a long delay.

        With ``delayed_add`` a sixth is added with a long delay. Neither listing names
        those; of the other two, the one released without delay is listed waiting and
        the one still held in flight.
        """
        part = s.require_browse(await s.open())
        ids = await s.add([b"m0", b"m1", b"m2", b"m3", b"m4"])
        got = await s.receive_n(s.queue, s.consumer("c"), 5)
        acked, dead, parked, free, keep = got
        far = 100 * s.lease
        assert await s.queue.ack([acked]) == []
        assert await s.queue.dead_letter([dead], reason="browse") == []
        assert await s.queue.release([parked], delay_seconds=far) == []
        assert await s.queue.release([free]) == []
        gone = {acked.message_id, dead.message_id, parked.message_id}
        scheduling = scheduling_of(s.queue) if s.capabilities.delayed_add else None
        if scheduling is not None:
            (added,) = await add_requests(
                scheduling, [AddRequest(body=b"delayed", delay_seconds=far)]
            )
            gone.add(added.message_id)
        most = len(ids) + 1
        waiting = await browse_all(part, "waiting", limit=2, most=most)
        in_flight = await browse_all(part, "in_flight", limit=2, most=most)
        listed = set(_ids(waiting)) | set(_ids(in_flight))
        assert not listed & gone, (
            f"browse listed {sorted(listed & gone)}, which are acked, dead-lettered or delayed"
        )
        assert _ids(waiting) == [free.message_id], (
            f"browse('waiting') listed {_ids(waiting)}, not [{free.message_id!r}]"
        )
        assert _ids(in_flight) == [keep.message_id], (
            f"browse('in_flight') listed {_ids(in_flight)}, not [{keep.message_id!r}]"
        )
        s.boundary(len(gone))

    @conformance("X84")
    async def test_invalid_browse_arguments_raise_value_error_before_anything_is_read(
        self, s: Scenario
    ) -> None:
        """Limits 0, -1, cap + 1 and 10**9, unknown states and malformed cursors.

        Each raises ValueError, also on a closed handle (checked before the handle);
        a limit of exactly the cap is accepted. The messages are then received as they
        were (count 1). A closed handle's browse raises QueueClosedError.
        """
        part = s.require_browse()
        ids = await s.add([b"x0", b"x1"])
        bad: list[tuple[str, Callable[[], Awaitable[object]]]] = []
        states = ("waiting", "in_flight")
        for limit in (0, -1, BROWSE_LIMIT + 1, 10**9):
            bad += [
                (f"browse({st!r}, limit={limit})", _call(part, st, limit=limit)) for st in states
            ]
        for name in ("ready", "", "WAITING", "running", "dead"):
            bad.append((f"browse({name!r})", _call(part, name)))
        for cursor in ("", "not a cursor", "\x00", "x" * 1000, "+", "-"):
            bad += [
                (f"browse({st!r}, after={cursor[:20]!r})", _call(part, st, after=cursor))
                for st in states
            ]
        wrong = []
        for name, call in bad:
            try:
                result = await call()
            except ValueError:
                continue
            except Exception as exc:
                wrong.append(f"{name} raised {exc!r}")
            else:
                wrong.append(f"{name} returned {result!r:.60}")
        assert not wrong, "invalid browse arguments were accepted: " + "; ".join(wrong)
        await browse_page(part, "waiting", None, BROWSE_LIMIT)
        await browse_page(part, "in_flight", None, BROWSE_LIMIT)
        got = await s.queue.receive(
            s.consumer("after"), max_messages=10, wait_seconds=0, lease_seconds=s.lease
        )
        assert sorted((d.message_id, d.delivery_count) for d in got) == sorted(
            (i, 1) for i in ids
        ), "after the refused browse calls, receive did not return both messages at count 1"
        s.boundary(len(bad))

        closing = await s.open()
        closed = s.require_browse(closing)
        await closing.aclose()
        await refused_when_closed(
            {
                "browse('waiting')": lambda: closed.browse("waiting"),
                "browse('in_flight')": lambda: closed.browse("in_flight", limit=1),
            },
            s.grace,
        )
        assert await s.queue.ack(got) == []

    @conformance("X85")
    async def test_with_body_bytes_a_longer_body_is_cut_to_it_and_body_size_is_its_length(
        self, s: Scenario
    ) -> None:
        """Bodies of 0, 10, 100 and 5,000 bytes, one of them in flight, listed with cuts.

        With ``body_bytes`` 0, 10, 64 and 5,000: a longer body is its first
        ``body_bytes`` bytes with ``body_size`` its whole length; a body not longer is
        whole, with ``body_size`` None or its length. ``body_bytes=None`` lists whole
        bodies. -1, 1.5, "10" and True raise ValueError. Not applicable to a ``browse``
        without the argument (contract 2.0).
        """
        part = s.require_browse()
        if not browse_takes_body_bytes(part):
            pytest.skip("not applicable: browse takes no body_bytes (contract 2.0)")
        bodies = [b"", bytes(range(10)), b"x" * 100, bytes(i % 251 for i in range(5000))]
        ids = await s.add(bodies)
        by_id = dict(zip(ids, bodies, strict=True))
        await s.receive_n(s.queue, s.consumer("holder"), 1)
        for cut in (0, 10, 64, 5000, None):
            listed = [
                m
                for state in ("waiting", "in_flight")
                for m in await part.browse(state, limit=BROWSE_LIMIT, body_bytes=cut)
            ]
            assert sorted(_ids(listed)) == sorted(ids), (
                f"browse(body_bytes={cut}) listed {sorted(_ids(listed))}, not {sorted(ids)}"
            )
            for m in listed:
                whole = by_id[m.message_id]
                if cut is not None and len(whole) > cut:
                    assert (m.body, m.body_size) == (whole[:cut], len(whole)), (
                        f"browse(body_bytes={cut}) listed a {len(whole)}-byte body as "
                        f"{len(m.body)} bytes with body_size {m.body_size}, not its first "
                        f"{cut} bytes with body_size {len(whole)}"
                    )
                else:
                    assert m.body == whole, (
                        f"browse(body_bytes={cut}) cut a {len(whole)}-byte body to "
                        f"{len(m.body)} bytes"
                    )
                    assert m.body_size in (None, len(whole)), (
                        f"browse(body_bytes={cut}) gave a whole {len(whole)}-byte body "
                        f"body_size {m.body_size}"
                    )
        s.boundary(4)
        wrong = []
        for bad in (-1, 1.5, "10", True):
            try:
                result = await part.browse("waiting", body_bytes=bad)  # type: ignore[arg-type]
            except ValueError:
                continue
            except Exception as exc:
                wrong.append(f"body_bytes={bad!r} raised {exc!r}")
            else:
                wrong.append(f"body_bytes={bad!r} returned {result!r:.60}")
        assert not wrong, "invalid body_bytes were accepted: " + "; ".join(wrong)
        s.boundary(4)
