"""Adding, receiving and settling messages of a `PartitionedQueue` across its shards.

Adds. `add` spreads bodies round robin over the shards (one pipelined XADD batch per
shard, in parallel). `add_requests` routes a request with a ``partition_key`` to the
shard that key hashes to (CRC32 mod K), so one key's messages stay on one shard in add
order; a request with a ``unique_key`` and no partition key goes to the shard its unique
key hashes to, so a unique key is unique across the whole queue; other requests go
round robin. A unique key given with a partition key is unique within that partition's
shard (always give one key's messages the same partition key).

Flow control. Admission runs in each shard's scripts, so a limit holds exactly only
if every message that counts on it is on one shard: every message of a flow key (its
concurrency, its add order) and every message of a rate key (its GCRA). A request with
a flow goes to the shard its *route* hashes to: its rate key (``Flow.rate_counter``)
when it has a rate, else its flow key. Every message of a rate key is so on one shard;
every message of a flow key is too as long as the key always comes with the same route,
which the queue enforces: on more than one shard, each flow key's route is recorded
(``f:route``, on the shard the flow key itself hashes to, checked and recorded in one
script) by the first add that uses it, and a request naming another route for that
key is refused with ValueError before anything of its batch is added (the routes of
the batch's other keys may have been recorded by then). So both limits
are exact, at the price of one more round trip (to the flow keys' own shards, in
parallel) per `add_requests` call with flows, and of one record per flow key until
`purge` or `delete_queue` (which clear them). Task limits keep a key's route: a key is
named after its task and the rate key is the task's. A flow with a ``partition_key``
other than its route is refused too (the two would route it to different shards). A
unique key given with a flow is unique within the route's shard, as with a partition
key. Round-robin across keys holds among the keys of one shard; a receive takes from
several shards at once, as for every message (ordering ``none``).

Receive. A receive first polls up to ``max_messages`` shards without blocking, in
parallel, starting at a shard that rotates with every call (fairness: no shard is
always read first), with ``max_messages`` split between them. Empty-handed, it blocks
on the shards no other receive of this handle is blocking on (each shard has at most
one blocked read per handle, so a handle with F fetchers holds at most K blocked
connections, not F x K); when one of its shards delivers, the others are ended at once
with ``CLIENT UNBLOCK`` and return what they leased, so nothing leased is ever dropped.
A receive finding every shard watched waits for a watch to end (or
`UNWATCHED_RECHECK_SECONDS`) and polls again; while some shard is watched by nobody, a
block lasts at most that long, so a message there waits at most that long.

Reclaim visits the shards in rotating order until it has ``max_messages``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from taskrunner.errors import BackendUnavailableError
from taskrunner.queue import Added, AddRequest, Delivery, Flow
from taskrunner_backends.checks import (
    check_bodies,
    check_count,
    check_deliveries,
    check_ids,
    check_requests,
    encode_reason,
)

from .adding import _encode_request, check_relay_ids
from .arguments import _check_consumer, _milliseconds
from .partitioned_shards import ShardsBase, _hash_shard, _split_evenly
from .queue import RedisStreamsQueue

__all__ = ["UNWATCHED_RECHECK_SECONDS", "DeliveryMixin"]

_log = logging.getLogger("taskrunner_backends.redis")

#: Longest a blocked receive lasts (seconds) while some shard has no blocked reader
#: of this handle: a message on such a shard waits at most this long for a receive.
UNWATCHED_RECHECK_SECONDS = 1.0


class DeliveryMixin(ShardsBase):
    """Adds, receives, the fenced lease operations, reclaim and cancel over the shards."""

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        """Enqueue bodies round robin over the shards, in parallel (one batch per shard).

        Raises:
            TypeError: A body is not `bytes` (nothing is added).
            BackendUnavailableError: A master could not be reached; some bodies may
                have been added.
        """
        bodies = check_bodies(bodies)
        self._check_open()
        if not bodies:
            return []
        await self._record_count()
        start = self._next_add
        self._next_add = (start + len(bodies)) % self._count
        parts: dict[int, list[int]] = {}
        for index in range(len(bodies)):
            parts.setdefault((start + index) % self._count, []).append(index)
        shards = list(parts)
        replies = await self._gather(
            [self._shards[s].add([bodies[i] for i in parts[s]]) for s in shards]
        )
        ids = [""] * len(bodies)
        for s, reply in zip(shards, replies, strict=True):
            for index, message_id in zip(parts[s], reply, strict=True):
                ids[index] = f"{s}@{message_id}"
        return ids

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        """Lease up to `max_messages` messages from the shards, waiting up to `wait_seconds`.

        See the module docstring for how shards are polled and watched. Not cancel-safe
        (as a single stream): a cancelled receive may leave messages leased until
        reclaimed.

        Raises:
            ValueError: `max_messages` < 1, `wait_seconds` < 0, `lease_seconds` <= 0,
                or a duration that is not finite.
            BackendUnavailableError: A master could not be reached.
            QueueClosedError: The queue is or became closed.
        """
        check_count("max_messages", max_messages)
        _check_consumer(consumer)
        _milliseconds("wait_seconds", wait_seconds, positive=False)
        _milliseconds("lease_seconds", lease_seconds, positive=True)
        self._check_open()
        deadline = self._clock.monotonic() + wait_seconds
        while True:
            order = self._usable(self._rotation("_next_receive"))
            got = await self._poll(order, consumer, max_messages, lease_seconds)
            if got:
                return got
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                return []
            free = [s for s in order if self._watchers[s] == 0][:max_messages]
            if not free:
                await self._await_watch_end(min(remaining, UNWATCHED_RECHECK_SECONDS))
                continue
            for s in free:
                self._watchers[s] += 1
            try:
                block = remaining
                if any(w == 0 for w in self._watchers):
                    block = min(block, UNWATCHED_RECHECK_SECONDS)
                got = await self._receive_from(
                    free, consumer, max_messages, block, lease_seconds, stop=asyncio.Event()
                )
            finally:
                for s in free:
                    self._watchers[s] -= 1
                if self._watch_ended is not None:
                    self._watch_ended.set()
                    self._watch_ended = None
            if got:
                return got

    async def _poll(
        self, order: list[int], consumer: str, max_messages: int, lease_seconds: float
    ) -> list[Delivery]:
        """Receive without blocking from every shard, in `order`, up to `max_messages`.

        In parallel (`max_messages` split between the shards) when every shard can be
        asked for at least one; else one shard after the other, so a small batch still
        looks at every shard and never leases more than `max_messages`.
        """
        if max_messages >= self._count:
            return await self._receive_from(
                order, consumer, max_messages, 0.0, lease_seconds, stop=None
            )
        return await self._one_by_one(
            order,
            max_messages,
            lambda shard, remaining: shard.receive(
                consumer, max_messages=remaining, wait_seconds=0.0, lease_seconds=lease_seconds
            ),
        )

    async def _one_by_one(
        self,
        order: list[int],
        limit: int,
        call: Callable[[RedisStreamsQueue, int], Awaitable[list[Delivery]]],
    ) -> list[Delivery]:
        """`call(shard, still wanted)` shard after shard in `order` until `limit` deliveries.

        An unreachable shard is skipped for a while (`_shard_failed`); the error is
        raised only when every shard of `order` failed.
        """
        found: list[Delivery] = []
        errors: list[BackendUnavailableError] = []
        for s in order:
            try:
                got = await call(self._shards[s], limit - len(found))
            except BackendUnavailableError as exc:
                self._shard_failed(s, exc)
                errors.append(exc)
                continue
            self._shard_ok(s)
            found.extend(self._wrap(s, d) for d in got)
            if len(found) >= limit:
                break
        if errors and len(errors) == len(order):
            raise errors[0]
        return found

    async def _await_watch_end(self, seconds: float) -> None:
        if self._watch_ended is None:
            self._watch_ended = asyncio.Event()
        ended = self._watch_ended
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await ended.wait()

    async def _receive_from(
        self,
        shards: list[int],
        consumer: str,
        max_messages: int,
        wait_seconds: float,
        lease_seconds: float,
        *,
        stop: asyncio.Event | None,
    ) -> list[Delivery]:
        """Receive from `shards` in parallel, `max_messages` split between them.

        With `stop`, the first shard to deliver sets it and the others return at once
        with whatever they leased; every leased message is returned, and an error is
        raised only when no shard delivered anything.
        """
        shares = _split_evenly(max_messages, len(shards))

        async def one(s: int, share: int) -> list[Delivery]:
            got = await self._shards[s].receive_until(
                consumer,
                max_messages=share,
                wait_seconds=wait_seconds,
                lease_seconds=lease_seconds,
                stop=stop,
            )
            if got and stop is not None:
                stop.set()
            return [self._wrap(s, d) for d in got]

        async def guarded(s: int, share: int) -> list[Delivery] | BaseException:
            try:
                got = await one(s, share)
            except BackendUnavailableError as exc:
                # Skipped for a while; the other shards go on (one dead master must not
                # stop the queue).
                self._shard_failed(s, exc)
                return exc
            except Exception as exc:
                if stop is not None:
                    stop.set()
                return exc
            self._shard_ok(s)
            return got

        outcomes = await asyncio.gather(
            *(guarded(s, n) for s, n in zip(shards, shares, strict=True))
        )
        deliveries = [d for o in outcomes if not isinstance(o, BaseException) for d in o]
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        unreachable = [e for e in errors if isinstance(e, BackendUnavailableError)]
        if errors and not deliveries and (len(errors) == len(shards) or errors != unreachable):
            # Every shard failed, or one failed otherwise: the caller backs off.
            raise errors[0]
        for error in errors:
            if error not in unreachable:
                _log.warning("%r: a shard failed while another delivered: %s", self, error)
        return deliveries

    async def heartbeat(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Heartbeat each delivery in its shard (one fenced script per shard, in parallel)."""
        return await self._by_shard(deliveries, lambda shard, part: shard.heartbeat(part))

    async def ack(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Complete each delivery in its shard; returns those not completed by this call."""
        return await self._by_shard(deliveries, lambda shard, part: shard.ack(part))

    async def release(
        self, deliveries: Sequence[Delivery], *, delay_seconds: float = 0.0
    ) -> list[Delivery]:
        """Re-add owned deliveries to their own shard, ready at once or after the delay."""
        _milliseconds("delay_seconds", delay_seconds, positive=False)
        return await self._by_shard(
            deliveries, lambda shard, part: shard.release(part, delay_seconds=delay_seconds)
        )

    async def dead_letter(self, deliveries: Sequence[Delivery], *, reason: str) -> list[Delivery]:
        """Dead-letter owned deliveries in their own shard, in the order given.

        Runs of consecutive deliveries of one shard go in one script, one run after the
        other (not in parallel), so the dead letters are listed in the order of the
        batch, as on a single stream. Dead-lettering is rare; the round trips are not.
        """
        check_deliveries(deliveries)
        encode_reason(reason)
        self._check_open()
        lost: list[Delivery] = []
        start = 0
        while start < len(deliveries):
            unwrapped = self._unwrap(deliveries[start])
            end = start + 1
            if unwrapped is not None:
                while end < len(deliveries):
                    after = self._unwrap(deliveries[end])
                    if after is None or after[0] != unwrapped[0]:
                        break
                    end += 1
            lost += await self._by_shard(
                deliveries[start:end], lambda shard, part: shard.dead_letter(part, reason=reason)
            )
            start = end
        return lost

    async def reclaim(
        self, consumer: str, *, lease_seconds: float, max_messages: int
    ) -> list[Delivery]:
        """Reclaim lapsed leases shard by shard, from a rotating start, up to `max_messages`."""
        _milliseconds("lease_seconds", lease_seconds, positive=True)
        check_count("max_messages", max_messages)
        _check_consumer(consumer)
        self._check_open()
        return await self._one_by_one(
            self._usable(self._rotation("_next_reclaim")),
            max_messages,
            lambda shard, remaining: shard.reclaim(
                consumer, lease_seconds=lease_seconds, max_messages=remaining
            ),
        )

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        """Add each request in the shard its partition key (or unique key) picks.

        Raises:
            TypeError: A request is not an `AddRequest`, or a field has the wrong type.
            ValueError: A duration is negative or not finite, or a key is empty.
            BackendUnavailableError: A master could not be reached; some of the
                requests may have been added.
        """
        requests = check_requests(requests, flow=True, priorities=True)
        self._check_open()
        # Every request is checked before any shard adds anything.
        for request in requests:
            _encode_request(request)
            self._check_flow_routing(request)
        await self._record_routes(requests)
        parts: dict[int, list[int]] = {}
        for index, request in enumerate(requests):
            parts.setdefault(self._shard_for(request), []).append(index)
        if not parts:
            return []
        await self._record_count()
        shards = list(parts)
        replies = await self._gather(
            [self._shards[s].add_requests([requests[i] for i in parts[s]]) for s in shards]
        )
        added: list[Added] = [Added(message_id="")] * len(requests)
        for s, reply in zip(shards, replies, strict=True):
            for index, one in zip(parts[s], reply, strict=True):
                added[index] = Added(message_id=f"{s}@{one.message_id}", added=one.added)
        return added

    async def add_relayed(
        self, requests: Sequence[AddRequest], relay_ids: Sequence[str], *, record_seconds: float
    ) -> list[Added]:
        """`add_requests`, idempotent per relay id (see `RedisStreamsQueue.add_relayed`).

        A request without a partition or unique key goes to the shard its relay id
        hashes to (not the next in turn), so a row sent again meets its record.
        """
        if isinstance(requests, AddRequest):
            raise TypeError("requests must be a sequence of AddRequest, not a single one")
        requests = check_requests(requests, flow=True, priorities=True)
        ids = check_relay_ids(relay_ids, len(requests))
        _milliseconds("record_seconds", record_seconds, positive=True)
        self._check_open()
        for request in requests:
            _encode_request(request)
            self._check_flow_routing(request)
        await self._record_routes(requests)
        parts: dict[int, list[int]] = {}
        for index, request in enumerate(requests):
            keyed = (
                request.partition_key is not None
                or request.unique_key is not None
                or request.flow is not None
            )
            shard = self._shard_for(request) if keyed else _hash_shard(ids[index], self._count)
            parts.setdefault(shard, []).append(index)
        if not parts:
            return []
        await self._record_count()
        shards = list(parts)
        replies = await self._gather(
            [
                self._shards[s].add_relayed(
                    [requests[i] for i in parts[s]],
                    [ids[i] for i in parts[s]],
                    record_seconds=record_seconds,
                )
                for s in shards
            ]
        )
        added: list[Added] = [Added(message_id="")] * len(requests)
        for s, reply in zip(shards, replies, strict=True):
            for index, one in zip(parts[s], reply, strict=True):
                added[index] = Added(message_id=f"{s}@{one.message_id}", added=one.added)
        return added

    def _check_flow_routing(self, request: AddRequest) -> None:
        """Refuse a flow with a partition key that would route it elsewhere."""
        flow = request.flow
        if flow is None or self._count == 1:
            return
        route = _route(flow)
        if request.partition_key is not None and request.partition_key != route:
            raise ValueError(
                f"a request with a flow is routed by {route!r} (its rate key when it has a"
                " rate, else its flow key); a different partition_key"
                f" ({request.partition_key!r}) would route it elsewhere: nothing was added"
            )

    async def _record_routes(self, requests: Sequence[AddRequest]) -> None:
        """Record each flow key's route on its own shard; refuse a key's second route.

        One script per flow key's shard, in parallel, before anything is added (see the
        module docstring). Nothing to do on one shard, where every limit is exact.

        Raises:
            ValueError: A flow key comes with another route than the one recorded for
                it (or than another request of the batch); nothing was added.
        """
        if self._count == 1:
            return
        routes: dict[str, str] = {}
        for request in requests:
            if request.flow is None:
                continue
            key, route = request.flow.key, _route(request.flow)
            if routes.setdefault(key, route) != route:
                raise ValueError(_route_conflict(key, routes[key], route, self._count))
        if not routes:
            return
        homes: dict[int, list[str]] = {}
        for key in routes:
            homes.setdefault(_hash_shard(key, self._count), []).append(key)
        shards = list(homes)
        replies = await self._gather(
            [self._shards[s].record_flow_routes({k: routes[k] for k in homes[s]}) for s in shards]
        )
        for recorded in replies:
            for key, route in recorded.items():
                if route != routes[key]:
                    raise ValueError(_route_conflict(key, route, routes[key], self._count))

    def _shard_for(self, request: AddRequest) -> int:
        if request.flow is not None:
            # Every message of a rate key, and of a flow key, on one shard (see above).
            return _hash_shard(_route(request.flow), self._count)
        key = request.partition_key if request.partition_key is not None else request.unique_key
        if key is not None:
            if not isinstance(key, str) or not key:  # type: ignore[redundant-expr]
                name = "partition_key" if request.partition_key is not None else "unique_key"
                raise ValueError(f"{name} must be a non-empty str, got {key!r}")
            return _hash_shard(key, self._count)
        shard = self._next_add
        self._next_add = (shard + 1) % self._count
        return shard

    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        """Cancel each id in its shard; False for ids of no shard of this queue."""
        ids = check_ids(message_ids)
        self._check_open()
        flags = [False] * len(ids)
        parts = self._split_ids(ids)
        shards = list(parts)
        replies = await self._gather(
            [self._shards[s].cancel([inner for _, inner in parts[s]]) for s in shards]
        )
        for s, reply in zip(shards, replies, strict=True):
            for (index, _), flag in zip(parts[s], reply, strict=True):
                flags[index] = flag
        return flags


def _route(flow: Flow) -> str:
    """What routes a message with `flow`: its rate key when it has a rate, else its key."""
    return flow.rate_counter if flow.rate is not None else flow.key


def _route_conflict(key: str, recorded: str, asked: str, shards: int) -> str:
    return (
        f"flow key {key!r} is routed by {recorded!r} on this queue of {shards} shards; a"
        f" request routing it by {asked!r} (its rate key when it has a rate, else its key)"
        " would split the key's messages over two shards and its limits with them: give"
        " one key's messages one rate key (or none) throughout; nothing was added"
    )
