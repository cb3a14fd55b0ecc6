"""Broken in-memory backends at the edges of the newer parts (house issue 31, item 7).

Each class breaks one side of one sentence of the Scheduling, ResultStore,
MessageBrowser or Leadership contract that suite 1.5 checked from the other side
only: every one passes suite 1.5 whole and fails the property named in
`BROKEN_EDGES` (checked with ``python -m tests.conformance.catch_rate --ref bb70d1b
--only NAME,...``). The defects sit in shims around the memory backend's parts (as in
broken_scheduling.py and broken_results.py) or in `InMemoryQueue.browse_messages` (as
in broken_browse.py); tests/conformance/broken.py merges them into its `BROKEN`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import msgspec

from taskrunner.queue import (
    BROWSE_LIMIT,
    Added,
    AddRequest,
    BrowsedMessage,
    BrowseState,
    Leadership,
    ResultStore,
    Scheduling,
)
from taskrunner_backends.memory import InMemoryQueue

from .broken_results import ResultShim
from .broken_scheduling import LeadershipShim, SchedulingShim
from .harnesses import SubclassHarness, subclass_factory

__all__ = ["BROKEN_EDGES"]


class _Shimmed(InMemoryQueue):
    """`InMemoryQueue` whose scheduling, leadership and results parts are shimmed."""

    scheduling_shim: type[SchedulingShim] = SchedulingShim
    leadership_shim: type[LeadershipShim] = LeadershipShim
    result_shim: type[ResultShim] = ResultShim

    @property
    def scheduling(self) -> Scheduling:
        return self.scheduling_shim(self, super().scheduling)

    @property
    def leadership(self) -> Leadership:
        return self.leadership_shim(self, super().leadership)

    @property
    def results(self) -> ResultStore:
        return self.result_shim(self, super().results)


# -- Scheduling ------------------------------------------------------------------------------


def _delayed(request: object) -> bool:
    if not isinstance(request, AddRequest):
        return False
    delay: object = request.delay_seconds
    return request.due_at is not None or (isinstance(delay, int | float) and delay > 0)


class _SilentDelayedAdds(SchedulingShim):
    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        if not requests or not all(_delayed(r) for r in requests):
            return await self.inner.add_requests(requests)
        store = self.queue._store
        # The add wakes an event nobody waits on: waiting receives keep the wake-up
        # they computed when they started.
        waiting, store.arrival = store.arrival, asyncio.Event()
        try:
            return await self.inner.add_requests(requests)
        finally:
            store.arrival = waiting


class DelayedAddWakesNoWaitingReceive(_Shimmed):
    """A delayed add does not reach receives already waiting: they sleep to their timeout."""

    scheduling_shim = _SilentDelayedAdds


class _RefreshOnRefusal(SchedulingShim):
    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        added = await self.inner.add_requests(requests)
        store = self.queue._store
        now = store.clock.monotonic()
        for request, result in zip(requests, added, strict=True):
            key, limit = request.unique_key, request.unique_seconds
            if not result.added and key is not None and limit is not None:
                store.unique[key] = (result.message_id, now + limit)
        return added


class RefusedRequestRestartsTheKeyExpiry(_Shimmed):
    """A refused request with unique_seconds restarts the holder's key expiry with them."""

    scheduling_shim = _RefreshOnRefusal


class _ZeroIsNone(SchedulingShim):
    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        # `if request.unique_seconds:` where `is not None` was meant.
        items: Sequence[object] = requests
        changed = [
            msgspec.structs.replace(r, unique_seconds=None)
            if isinstance(r, AddRequest) and r.unique_seconds == 0
            else r
            for r in items
        ]
        return await self.inner.add_requests(changed)  # type: ignore[arg-type]


class UniqueSecondsZeroHoldsTheKey(_Shimmed):
    """unique_seconds=0 is taken for None: the key is held until the message's outcome."""

    scheduling_shim = _ZeroIsNone


class _CancelFreesHeldKeys(SchedulingShim):
    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        flags = await self.inner.cancel(message_ids)
        store = self.queue._store
        for message_id in message_ids:
            message = store.in_flight.get(message_id)
            key = None if message is None else message.unique_key
            # The key row goes first, then the message is found in flight and kept.
            if key is not None and store.unique.get(key, ("",))[0] == message_id:
                del store.unique[key]
        return flags


class CancelOfAnInFlightMessageFreesItsKey(_Shimmed):
    """cancel refuses an in-flight message (False) but frees its unique key."""

    scheduling_shim = _CancelFreesHeldKeys


# -- ResultStore -----------------------------------------------------------------------------


class _ReadsUnswept(ResultShim):
    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        if isinstance(message_ids, str) or not all(isinstance(i, str) for i in message_ids):
            return await self.inner.get_results(message_ids)  # raises as the backend does
        queue = self.queue
        queue._check_open()
        store = queue._store
        # Only the bounded sweep drops expired results; a read trusts what is left.
        queue._sweep_results(store.clock.monotonic(), 0)
        return [store.results[i][0] if i in store.results else None for i in message_ids]


class ExpiredResultsReadUntilSwept(_Shimmed):
    """get_results answers expired results the bounded sweep has not reached yet."""

    result_shim = _ReadsUnswept


# -- MessageBrowser --------------------------------------------------------------------------


class BrowsePagesByPosition(InMemoryQueue):
    """A cursor is a position in the listing (OFFSET paging): moves shift what comes next."""

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        await super().browse_messages(state, after=after, limit=limit)  # the argument checks
        listing = await super().browse_messages(state, limit=BROWSE_LIMIT)
        start = 0 if after is None else int(after)
        return [
            msgspec.structs.replace(m, cursor=str(start + n + 1))
            for n, m in enumerate(listing[start : start + limit])
        ]


class BrowseLosesItsPlaceWhenTheCursorMoves(InMemoryQueue):
    """A page after a cursor whose message left the listing is empty (the cursor is looked up)."""

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        page = await super().browse_messages(state, after=after, limit=limit)
        if after is not None:
            message = self._store.messages.get(after)
            leased = message is not None and message.state == "in_flight"
            if message is None or leased != (state == "in_flight"):
                return []
        return page


class BrowseSkipsDueReleasedMessages(InMemoryQueue):
    """The waiting list holds only messages a receive has made ready, not due delayed ones."""

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        page = await super().browse_messages(state, after=after, limit=limit)
        if state == "waiting":
            messages = self._store.messages
            page = [m for m in page if messages[m.message_id].state == "ready"]
        return page


# -- Leadership ------------------------------------------------------------------------------


class _ResignLapses(LeadershipShim):
    async def resign_leadership(self, name: str, holder: str, token: int) -> bool:
        current = await self.inner.current_leader(name)
        if current is not None and (current.holder, current.token) == (holder, token):
            # "Resign" as "lapse now": the record stays, so the holder's renew still works.
            store = self.queue._store
            store.elections[name].expiry = store.clock.monotonic()
            return True
        arguments: tuple[object, object] = (holder, token)
        if (
            current is None
            and isinstance(arguments[0], str)
            and arguments[0]
            and type(arguments[1]) is int
        ):
            return False
        return await self.inner.resign_leadership(name, holder, token)


class ResignOnlyLapsesTheLease(_Shimmed):
    """resign ends the lease as a lapse would: the resigned holder can renew it back."""

    leadership_shim = _ResignLapses


class _FireNeedsARecord(LeadershipShim):
    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        name: object = election
        if isinstance(name, str) and name not in self.queue._store.elections:
            # Checked as usual, then refused: a token no election names never fires.
            await self.inner.fire(
                election=election, token=-1, schedule=schedule, instant=instant, body=body
            )
            return None
        return await self.inner.fire(
            election=election, token=token, schedule=schedule, instant=instant, body=body
        )


class FireRefusedAfterAResign(_Shimmed):
    """fire needs the election's lease record, which a resign deletes: the latest token fails."""

    leadership_shim = _FireNeedsARecord


# Factory name -> (harness factory, the property that names the defect).
BROKEN_EDGES: dict[str, tuple[Callable[[], SubclassHarness], str]] = {
    "delayed_add_wakes_no_waiting_receive": (
        subclass_factory(DelayedAddWakesNoWaitingReceive),
        "X40",
    ),
    "refused_request_restarts_the_key_expiry": (
        subclass_factory(RefusedRequestRestartsTheKeyExpiry),
        "X42",
    ),
    "unique_seconds_zero_holds_the_key": (subclass_factory(UniqueSecondsZeroHoldsTheKey), "X45"),
    "cancel_of_an_in_flight_message_frees_its_key": (
        subclass_factory(CancelOfAnInFlightMessageFreesItsKey),
        "X47",
    ),
    "expired_results_read_until_swept": (subclass_factory(ExpiredResultsReadUntilSwept), "X60"),
    "browse_pages_by_position": (subclass_factory(BrowsePagesByPosition), "X80"),
    "browse_loses_its_place_when_the_cursor_moves": (
        subclass_factory(BrowseLosesItsPlaceWhenTheCursorMoves),
        "X80",
    ),
    "browse_skips_due_released_messages": (
        subclass_factory(BrowseSkipsDueReleasedMessages),
        "X80",
    ),
    "resign_only_lapses_the_lease": (subclass_factory(ResignOnlyLapsesTheLease), "X53"),
    "fire_refused_after_a_resign": (subclass_factory(FireRefusedAfterAResign), "X54"),
}
