"""Broken in-memory backends for the optional ResultStore and MessageLookup parts (X60-X75).

Each class has one defect of task results or of the state lookup, of the kind a
backend written against the contract plausibly has; the property whose name names
the defect must fail it on every run. The defects sit in shims around the memory
backend's own parts (`ResultShim`, `LookupShim`), which the broken queue returns from
its ``results`` and ``lookup`` properties. `BROKEN_RESULTS` maps a factory name to
the harness factory and the property; tests/conformance/broken.py merges it into its
`BROKEN`, so test_broken_backends and catch_rate run them all. Run one with
``python -m taskrunner_conformance tests.conformance.broken_results:first_write_wins``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from taskrunner.clock import wait_future
from taskrunner.queue import (
    Added,
    AddRequest,
    MessageLookup,
    MessageState,
    ResultStore,
    ResultWrite,
)
from taskrunner_backends.memory import InMemoryQueue

from .harnesses import SubclassHarness, subclass_factory

__all__ = ["BROKEN_RESULTS", "LookupShim", "ResultShim"]

# State a defect keeps per store, shared by every handle on it. Keyed by the store's
# id, with the store kept alive, so no later store can inherit the id and the state.
_STATE: dict[int, tuple[object, dict[str, Any]]] = {}


def _state(queue: InMemoryQueue) -> dict[str, Any]:
    store = queue._store
    entry = _STATE.get(id(store))
    if entry is None or entry[0] is not store:
        entry = (store, {"written": set(), "added": set(), "holders": {}, "event": None})
        _STATE[id(store)] = entry
    return entry[1]


def _valid_ttl(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _plausible(write: object) -> bool:
    """Whether `write` is one the backend accepts (the shim may then act on it itself)."""
    if not isinstance(write, ResultWrite):
        return False
    # The fields are typed, but a caller may put anything in them; check what it did.
    fields: tuple[object, object] = (write.body, write.message_id)
    return (
        isinstance(fields[0], bytes)
        and isinstance(fields[1], str)
        and fields[1] != ""
        and _valid_ttl(write.ttl_seconds)
    )


class ResultShim:
    """Passes every call to the memory backend's `ResultStore`; defects override."""

    def __init__(self, queue: InMemoryQueue, inner: ResultStore) -> None:
        self.queue = queue
        self.inner = inner

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        await self.inner.put_results(results)

    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        return await self.inner.get_results(message_ids)

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        return await self.inner.wait_result(message_id, timeout_seconds=timeout_seconds)

    async def delete_results(self, message_ids: Sequence[str]) -> int:
        return await self.inner.delete_results(message_ids)


class LookupShim:
    """Passes every call to the memory backend's `MessageLookup`; defects override."""

    def __init__(self, queue: InMemoryQueue, inner: MessageLookup) -> None:
        self.queue = queue
        self.inner = inner

    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        return await self.inner.lookup(message_ids)


class _Shimmed(InMemoryQueue):
    """`InMemoryQueue` whose results and lookup parts are wrapped in the shims a defect names."""

    result_shim: type[ResultShim] = ResultShim
    lookup_shim: type[LookupShim] = LookupShim

    @property
    def results(self) -> ResultStore:
        return self.result_shim(self, super().results)

    @property
    def lookup(self) -> MessageLookup:
        return self.lookup_shim(self, super().lookup)


def _rewritten(writes: Sequence[object], change: Callable[[ResultWrite], ResultWrite]) -> list[Any]:
    # Writes the backend must refuse go through untouched, for it to refuse.
    return [change(w) if _plausible(w) else w for w in writes]  # type: ignore[arg-type]


# -- ResultStore: TTLs ---------------------------------------------------------------------


class _LongTtl(ResultShim):
    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        await self.inner.put_results(
            _rewritten(
                results, lambda w: msgspec.structs.replace(w, ttl_seconds=1.05 * w.ttl_seconds)
            )
        )


class ResultTtlFivePercentLong(_Shimmed):
    """Results are kept 5 % longer than their TTL (a TTL rounded up to whole seconds, say)."""

    result_shim = _LongTtl


class _ShortTtl(ResultShim):
    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        await self.inner.put_results(
            _rewritten(
                results, lambda w: msgspec.structs.replace(w, ttl_seconds=0.95 * w.ttl_seconds)
            )
        )


class ResultTtlFivePercentShort(_Shimmed):
    """Results expire 5 % before their TTL."""

    result_shim = _ShortTtl


class _KeepsExpiry(ResultShim):
    """Rewrites keep the earlier expiry when `keep` says so."""

    def keep(self, old: float, new: float) -> bool:
        return True

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        store = self.queue._store
        before = dict(store.results)
        await self.inner.put_results(results)
        now = store.clock.monotonic()
        for message_id, (_, old_expiry) in before.items():
            held = store.results.get(message_id)
            if held is not None and old_expiry > now and self.keep(old_expiry, held[1]):
                # The old expiry's heap entry is still there, so the sweep honours it.
                store.results[message_id] = (held[0], old_expiry)


class TtlNotRestartedOnRewrite(_Shimmed):
    """A rewrite replaces the body but keeps the first write's expiry (SET ... KEEPTTL)."""

    result_shim = _KeepsExpiry


class _KeepsLonger(_KeepsExpiry):
    def keep(self, old: float, new: float) -> bool:
        return old > new


class RewriteKeepsTheLongerTtl(_Shimmed):
    """A rewrite with a shorter TTL keeps the longer one (an expiry only ever extended)."""

    result_shim = _KeepsLonger


class _TtlZeroForever(ResultShim):
    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        def forever(w: object) -> object:
            if isinstance(w, ResultWrite) and w.ttl_seconds == 0:
                return msgspec.structs.replace(w, ttl_seconds=1e9)
            return w

        await self.inner.put_results([forever(w) for w in results])  # type: ignore[misc]


class TtlZeroKeepsForever(_Shimmed):
    """A TTL of 0 is taken for "no expiry" instead of refused."""

    result_shim = _TtlZeroForever


# -- ResultStore: writes -----------------------------------------------------------------


class _FirstInBatch(ResultShim):
    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        seen: set[str] = set()
        kept: list[ResultWrite] = []
        for write in results:
            if _plausible(write):
                if write.message_id in seen:
                    continue
                seen.add(write.message_id)
            kept.append(write)
        await self.inner.put_results(kept)


class FirstWriteWinsInABatch(_Shimmed):
    """Two writes of one id in one batch: the first wins (HSETNX-style dedupe)."""

    result_shim = _FirstInBatch


class _FirstWins(ResultShim):
    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        stored = {
            i
            for i, body in zip(
                [w.message_id for w in results if _plausible(w)],
                await self.inner.get_results([w.message_id for w in results if _plausible(w)]),
                strict=True,
            )
            if body is not None
        }
        await self.inner.put_results(
            [w for w in results if not (_plausible(w) and w.message_id in stored)]
        )


class FirstWriteWins(_Shimmed):
    """A write of an id that holds a live result is dropped (SET NX)."""

    result_shim = _FirstWins


class _OneByOne(ResultShim):
    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        for write in results:
            await self.inner.put_results([write])


class ValidationAfterPartialStore(_Shimmed):
    """Each write is checked and stored in turn: a bad item leaves the earlier ones stored."""

    result_shim = _OneByOne


class _EmptyIsMissing(ResultShim):
    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        return [body or None for body in await self.inner.get_results(message_ids)]

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        body = await self.inner.wait_result(message_id, timeout_seconds=timeout_seconds)
        return body or None


class EmptyResultIsNoResult(_Shimmed):
    """An empty body reads as no result (``if not value``)."""

    result_shim = _EmptyIsMissing


class _CaseInsensitive(ResultShim):
    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        await self.inner.put_results(
            _rewritten(
                results, lambda w: msgspec.structs.replace(w, message_id=w.message_id.lower())
            )
        )

    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        return await self.inner.get_results([i.lower() for i in message_ids])

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        return await self.inner.wait_result(message_id.lower(), timeout_seconds=timeout_seconds)

    async def delete_results(self, message_ids: Sequence[str]) -> int:
        return await self.inner.delete_results([i.lower() for i in message_ids])


class ResultIdsCaseInsensitive(_Shimmed):
    """Result ids are folded to lower case (a case-insensitive key space)."""

    result_shim = _CaseInsensitive


# One results table for every store: results keyed by message id alone, not by queue.
_SHARED_RESULTS: dict[str, tuple[bytes, float]] = {}
_SHARED_EXPIRIES: list[tuple[float, str]] = []


class ResultsSharedAcrossQueues(_Shimmed):
    """Every queue reads and writes one results table (keys without the queue's name)."""

    @property
    def results(self) -> ResultStore:
        store = self._store
        store.results = _SHARED_RESULTS
        store.result_expiries = _SHARED_EXPIRIES
        return super().results


class ResultsSurviveDeleteQueue(_Shimmed):
    """delete_queue deletes everything but the results."""

    async def delete_queue(self) -> None:
        store = self._store
        results, expiries = dict(store.results), list(store.result_expiries)
        await super().delete_queue()
        store.results.update(results)
        store.result_expiries.extend(expiries)


class _CountsWritten(ResultShim):
    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        await self.inner.put_results(results)
        _state(self.queue)["written"].update(w.message_id for w in results)

    async def delete_results(self, message_ids: Sequence[str]) -> int:
        written: set[str] = _state(self.queue)["written"]
        counted = {i for i in message_ids if i in written}
        await self.inner.delete_results(message_ids)
        written -= counted
        return len(counted)


class DeleteCountsExpiredResults(_Shimmed):
    """delete_results counts every id written and not deleted, expired ones too (DEL on a
    key the server has not expired yet)."""

    result_shim = _CountsWritten


# -- ResultStore: waiting -----------------------------------------------------------------


class _WaitsOutTheTimeout(ResultShim):
    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        await self.inner.wait_result(message_id, timeout_seconds=0)  # validates, checks open
        await self.queue._store.clock.sleep(timeout_seconds)
        (body,) = await self.inner.get_results([message_id])
        return body


class WaitResultReturnsOnlyAtItsTimeout(_Shimmed):
    """wait_result sleeps out its timeout and then reads once (polling at the timeout)."""

    result_shim = _WaitsOutTheTimeout


class _PollsSlowly(ResultShim):
    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        clock = self.queue._store.clock
        deadline = clock.monotonic() + timeout_seconds
        while True:
            body = await self.inner.wait_result(message_id, timeout_seconds=0)
            remaining = deadline - clock.monotonic()
            if body is not None or remaining <= 0:
                return body
            await clock.sleep(min(0.5, remaining))


class WaitResultPollsEveryHalfSecond(_Shimmed):
    """wait_result polls every 0.5 s, though the backend claims result_notify."""

    result_shim = _PollsSlowly


class _EarlyTimeout(ResultShim):
    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        shortened = 0.9 * timeout_seconds if _valid_ttl(timeout_seconds) else timeout_seconds
        return await self.inner.wait_result(message_id, timeout_seconds=shortened)


class WaitResultGivesUpEarly(_Shimmed):
    """wait_result returns None at 90 % of its timeout."""

    result_shim = _EarlyTimeout


class _WokenByAnyPut(ResultShim):
    """Waits wake on any put of the store and return whatever is stored then."""

    def _event(self) -> asyncio.Event:
        state = _state(self.queue)
        if state["event"] is None:
            state["event"] = asyncio.Event()
        event: asyncio.Event = state["event"]
        return event

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        await self.inner.put_results(results)
        state = _state(self.queue)
        event = self._event()
        state["event"] = None
        event.set()

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        body = await self.inner.wait_result(message_id, timeout_seconds=0)
        if body is not None or timeout_seconds == 0:
            return body
        event = self._event()
        future = asyncio.ensure_future(event.wait())
        try:
            await wait_future(self.queue._store.clock, future, timeout_seconds)
        finally:
            future.cancel()
        (body,) = await self.inner.get_results([message_id])
        return body


class WaitResultWokenByAnyPut(_Shimmed):
    """Any put wakes every wait, which returns what its id holds then (None for a put of
    another id): one shared notification channel, no check of the id."""

    result_shim = _WokenByAnyPut


class _ZeroMeansNo(ResultShim):
    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        if timeout_seconds == 0 and message_id:
            return None
        return await self.inner.wait_result(message_id, timeout_seconds=timeout_seconds)


class WaitResultWithTimeout0IgnoresAStoredResult(_Shimmed):
    """wait_result(timeout_seconds=0) returns None without looking."""

    result_shim = _ZeroMeansNo


class _SubscribesLate(ResultShim):
    """Looks, then subscribes to puts of its id: a put in between is never seen."""

    def _waiters(self) -> dict[str, list[asyncio.Future[None]]]:
        state = _state(self.queue)
        waiters: dict[str, list[asyncio.Future[None]]] = state.setdefault("waiters", {})
        return waiters

    async def put_results(self, results: Sequence[ResultWrite]) -> None:
        await self.inner.put_results(results)
        for write in results:
            for future in self._waiters().pop(write.message_id, []):
                if not future.done():
                    future.set_result(None)

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        body = await self.inner.wait_result(message_id, timeout_seconds=0)
        if body is not None or timeout_seconds == 0:
            return body
        # The round trip of a SUBSCRIBE after the GET.
        await asyncio.sleep(0)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters().setdefault(message_id, []).append(future)
        try:
            await wait_future(self.queue._store.clock, future, timeout_seconds)
        finally:
            future.cancel()
        (body,) = await self.inner.get_results([message_id])
        return body


class WaitResultMissesAPutRacingItsStart(_Shimmed):
    """wait_result reads, then subscribes: a put landing in between waits out the timeout."""

    result_shim = _SubscribesLate


class _SwallowsCancel(ResultShim):
    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        try:
            return await self.inner.wait_result(message_id, timeout_seconds=timeout_seconds)
        except asyncio.CancelledError:
            # The defect: a cancelled wait returns "no result" instead of ending cancelled.
            return None


class WaitResultSwallowsCancellation(_Shimmed):
    """A cancelled wait_result returns None instead of raising CancelledError."""

    result_shim = _SwallowsCancel


class _DeafToClose(_SubscribesLate):
    """Subscribes before it looks (no race), but nothing wakes it when its handle closes."""

    async def wait_result(self, message_id: str, *, timeout_seconds: float) -> bytes | None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters().setdefault(message_id, []).append(future)
        try:
            body = await self.inner.wait_result(message_id, timeout_seconds=0)
            if body is not None or timeout_seconds == 0:
                return body
            await wait_future(self.queue._store.clock, future, timeout_seconds)
        finally:
            future.cancel()
        (body,) = await self.inner.get_results([message_id])
        return body


class WaitResultNotEndedByAclose(_Shimmed):
    """A wait_result in progress keeps waiting when its handle is closed (and then returns
    None at its timeout, or raises only on its next read)."""

    result_shim = _DeafToClose


class _RefusesEmptyIds(ResultShim):
    async def get_results(self, message_ids: Sequence[str]) -> list[bytes | None]:
        if "" in list(message_ids):
            raise ValueError("message ids must not be empty")
        return await self.inner.get_results(message_ids)


class GetResultsRefusesAnEmptyId(_Shimmed):
    """get_results raises ValueError for an empty id instead of answering None."""

    result_shim = _RefusesEmptyIds


# -- MessageLookup ---------------------------------------------------------------------------


def _replace(message: MessageState, **change: Any) -> MessageState:
    return msgspec.structs.replace(message, **change)


class _ReleasedRunning(LookupShim):
    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        return [
            _replace(st, state="running", consumer="released", due_at=None)
            if st is not None and st.state in ("ready", "delayed") and st.delivery_count > 0
            else st
            for st in await self.inner.lookup(message_ids)
        ]


class LookupReportsReleasedAsRunning(_Shimmed):
    """A released message still reads as running (the lease record is not cleared)."""

    lookup_shim = _ReleasedRunning


class _CountsNextDelivery(LookupShim):
    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        return [
            _replace(st, delivery_count=st.delivery_count + 1)
            if st is not None and st.state in ("ready", "delayed") and st.delivery_count > 0
            else st
            for st in await self.inner.lookup(message_ids)
        ]


class LookupCountsTheNextDeliveryOfAReleasedMessage(_Shimmed):
    """A released message's count already includes the redelivery it waits for."""

    lookup_shim = _CountsNextDelivery


class _OverdueDelayed(LookupShim):
    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        store = self.queue._store
        answers = []
        for st in await self.inner.lookup(message_ids):
            message = store.messages.get(st.message_id) if st is not None else None
            if st is not None and message is not None and message.state == "delayed":
                st = _replace(st, state="delayed")
            answers.append(st)
        return answers


class LookupReportsOverdueAsDelayed(_Shimmed):
    """A delayed message past its due time reads as delayed until a receive promotes it."""

    lookup_shim = _OverdueDelayed


class _FirstHolder(LookupShim):
    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        holders: dict[str, str] = _state(self.queue)["holders"]
        answers = []
        for st in await self.inner.lookup(message_ids):
            if st is not None and st.state == "running" and st.consumer is not None:
                st = _replace(st, consumer=holders.setdefault(st.message_id, st.consumer))
            answers.append(st)
        return answers


class LookupKeepsTheFirstHolder(_Shimmed):
    """A running message names the first consumer it was seen with, not its reclaimer."""

    lookup_shim = _FirstHolder


class _ForgetsDead(LookupShim):
    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        return [
            None if st is not None and st.state == "dead" else st
            for st in await self.inner.lookup(message_ids)
        ]


class LookupForgetsDeadLetters(_Shimmed):
    """Dead letters are not found by their original id (no index by original id)."""

    lookup_shim = _ForgetsDead


class _RemembersEveryId(LookupShim):
    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        added: set[str] = _state(self.queue)["added"]
        return [
            MessageState(message_id=i, state="ready", delivery_count=0)
            if st is None and i in added
            else st
            for i, st in zip(message_ids, await self.inner.lookup(message_ids), strict=True)
        ]


class LookupAnswersForCompletedMessages(_Shimmed):
    """Acked, cancelled and purged messages still read as ready (a status record never
    deleted)."""

    lookup_shim = _RemembersEveryId

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        ids = await super().add(bodies)
        _state(self)["added"].update(ids)
        return ids

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        added = await super().add_requests(requests)
        _state(self)["added"].update(a.message_id for a in added)
        return added


class _RaisesOnOddIds(LookupShim):
    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        for message_id in message_ids:
            if not message_id.strip() or len(message_id) > 1000:
                raise ValueError(f"not a message id: {message_id[:20]!r}")
        return await self.inner.lookup(message_ids)


class LookupRaisesOnMalformedIds(_Shimmed):
    """lookup raises ValueError for an empty, blank or overlong id instead of answering None."""

    lookup_shim = _RaisesOnOddIds


class _Deduplicates(LookupShim):
    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        seen: set[str] = set()
        answers = []
        for i, st in zip(message_ids, await self.inner.lookup(message_ids), strict=True):
            answers.append(None if i in seen else st)
            seen.add(i)
        return answers


class LookupAnswersAnIdNamedTwiceOnce(_Shimmed):
    """An id named twice in one lookup is answered only the first time (None after)."""

    lookup_shim = _Deduplicates


def _factory(queue_class: type[InMemoryQueue]) -> Callable[[], SubclassHarness]:
    return subclass_factory(queue_class)


# Factory name -> (harness factory, the property that names the defect).
BROKEN_RESULTS: dict[str, tuple[Callable[[], SubclassHarness], str]] = {
    "result_ttl_5_percent_long": (_factory(ResultTtlFivePercentLong), "X60"),
    "result_ttl_5_percent_short": (_factory(ResultTtlFivePercentShort), "X60"),
    "empty_result_is_no_result": (_factory(EmptyResultIsNoResult), "X60"),
    "ttl_not_restarted_on_rewrite": (_factory(TtlNotRestartedOnRewrite), "X61"),
    "rewrite_keeps_the_longer_ttl": (_factory(RewriteKeepsTheLongerTtl), "X61"),
    "first_write_wins_in_a_batch": (_factory(FirstWriteWinsInABatch), "X61"),
    "first_write_wins": (_factory(FirstWriteWins), "X61"),
    "result_ids_case_insensitive": (_factory(ResultIdsCaseInsensitive), "X62"),
    "results_shared_across_queues": (_factory(ResultsSharedAcrossQueues), "X62"),
    "wait_result_returns_only_at_its_timeout": (
        _factory(WaitResultReturnsOnlyAtItsTimeout),
        "X63",
    ),
    "wait_result_polls_every_half_second": (_factory(WaitResultPollsEveryHalfSecond), "X63"),
    "wait_result_woken_by_any_put": (_factory(WaitResultWokenByAnyPut), "X63"),
    "wait_result_timeout_0_ignores_a_stored_result": (
        _factory(WaitResultWithTimeout0IgnoresAStoredResult),
        "X63",
    ),
    "wait_result_misses_a_put_racing_its_start": (
        _factory(WaitResultMissesAPutRacingItsStart),
        "X63",
    ),
    "wait_result_swallows_cancellation": (_factory(WaitResultSwallowsCancellation), "X63"),
    "wait_result_gives_up_early": (_factory(WaitResultGivesUpEarly), "X64"),
    "results_survive_delete_queue": (_factory(ResultsSurviveDeleteQueue), "X65"),
    "delete_counts_expired_results": (_factory(DeleteCountsExpiredResults), "X65"),
    "validation_after_partial_store": (_factory(ValidationAfterPartialStore), "X66"),
    "get_results_refuses_an_empty_id": (_factory(GetResultsRefusesAnEmptyId), "X66"),
    "wait_result_not_ended_by_aclose": (_factory(WaitResultNotEndedByAclose), "X1"),
    "ttl_zero_keeps_forever": (_factory(TtlZeroKeepsForever), "X66"),
    "lookup_reports_overdue_as_delayed": (_factory(LookupReportsOverdueAsDelayed), "X71"),
    "lookup_keeps_the_first_holder": (_factory(LookupKeepsTheFirstHolder), "X72"),
    "lookup_reports_released_as_running": (_factory(LookupReportsReleasedAsRunning), "X73"),
    "lookup_counts_the_next_delivery": (
        _factory(LookupCountsTheNextDeliveryOfAReleasedMessage),
        "X73",
    ),
    "lookup_forgets_dead_letters": (_factory(LookupForgetsDeadLetters), "X74"),
    "lookup_answers_for_completed_messages": (_factory(LookupAnswersForCompletedMessages), "X75"),
    "lookup_raises_on_malformed_ids": (_factory(LookupRaisesOnMalformedIds), "X75"),
    "lookup_answers_an_id_named_twice_once": (_factory(LookupAnswersAnIdNamedTwiceOnce), "X75"),
}

first_write_wins = BROKEN_RESULTS["first_write_wins"][0]
