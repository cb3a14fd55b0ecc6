"""Broken in-memory backends for the optional MessageBrowser part (X80-X84).

Each class has one defect of the browse listing, of the kind a backend written against
the contract plausibly has; the property whose name names the defect must fail it on
every run. The defects override `InMemoryQueue.browse_messages`, which the memory
backend's ``browse`` part calls. `BROKEN_BROWSE` maps a factory name to the harness
factory and the property; tests/conformance/broken.py merges it into its `BROKEN`.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from taskrunner.queue import BROWSE_LIMIT, BrowsedMessage, BrowseState
from taskrunner_backends.memory import InMemoryQueue, _browsed

from .harnesses import SubclassHarness, subclass_factory

__all__ = ["BROKEN_BROWSE"]


def _by_cursor(messages: list[BrowsedMessage], limit: int) -> list[BrowsedMessage]:
    return sorted(messages, key=lambda m: int(m.cursor))[:limit]


class BrowseResetsTheIdleTimeOfLeases(InMemoryQueue):
    """Reading the in-flight list touches every lease, as a heartbeat would."""

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        page = await super().browse_messages(state, after=after, limit=limit)
        if state == "in_flight":
            now = self._store.clock.monotonic()
            for message in self._store.in_flight.values():
                message.touched_at = now
        return page


class BrowseIgnoresTheCursor(InMemoryQueue):
    """Every page starts at the first message."""

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        return await super().browse_messages(state, after=None, limit=limit)


class BrowseListsLeasedMessagesAsWaiting(InMemoryQueue):
    """The waiting list holds the in-flight messages too (a listing of 'not acked')."""

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        page = await super().browse_messages(state, after=after, limit=limit)
        if state == "waiting":
            page = _by_cursor(
                page + await super().browse_messages("in_flight", after=after, limit=limit), limit
            )
        return page


class BrowseListsDelayedMessagesAsWaiting(InMemoryQueue):
    """The waiting list holds messages released with a delay that is not over."""

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        page = await super().browse_messages(state, after=after, limit=limit)
        if state == "waiting":
            store = self._store
            now, wall = store.clock.monotonic(), store.clock.time()
            start = int(after) if after is not None else 0
            delayed = [
                _browsed(m, now, wall)
                for m in store.messages.values()
                if m.state == "delayed" and m.due > now and int(m.id) > start
            ]
            page = _by_cursor(page + delayed, limit)
        return page


class BrowseNamesNoHolder(InMemoryQueue):
    """In-flight messages are listed without their holder."""

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        page = await super().browse_messages(state, after=after, limit=limit)
        return [msgspec.structs.replace(m, consumer=None) for m in page]


class BrowseCountsTheNextDelivery(InMemoryQueue):
    """A released message is listed with the delivery count it will have when received."""

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        page = await super().browse_messages(state, after=after, limit=limit)
        if state == "in_flight":
            return page
        return [
            msgspec.structs.replace(m, delivery_count=m.delivery_count + 1)
            if m.delivery_count
            else m
            for m in page
        ]


class BrowseClampsALimitAboveTheCap(InMemoryQueue):
    """A limit above the cap is clamped instead of refused."""

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        if limit > BROWSE_LIMIT:
            limit = BROWSE_LIMIT
        return await super().browse_messages(state, after=after, limit=limit)


def _factory(queue_class: type[InMemoryQueue]) -> Callable[[], SubclassHarness]:
    return subclass_factory(queue_class)


# Factory name -> (harness factory, the property that names the defect).
BROKEN_BROWSE: dict[str, tuple[Callable[[], SubclassHarness], str]] = {
    "browse_resets_the_idle_time_of_leases": (_factory(BrowseResetsTheIdleTimeOfLeases), "X82"),
    "browse_ignores_the_cursor": (_factory(BrowseIgnoresTheCursor), "X80"),
    "browse_lists_leased_messages_as_waiting": (
        _factory(BrowseListsLeasedMessagesAsWaiting),
        "X80",
    ),
    "browse_lists_delayed_messages_as_waiting": (
        _factory(BrowseListsDelayedMessagesAsWaiting),
        "X83",
    ),
    "browse_names_no_holder": (_factory(BrowseNamesNoHolder), "X81"),
    "browse_counts_the_next_delivery": (_factory(BrowseCountsTheNextDelivery), "X80"),
    "browse_clamps_a_limit_above_the_cap": (_factory(BrowseClampsALimitAboveTheCap), "X84"),
}
