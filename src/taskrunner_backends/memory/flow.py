"""Flow control in memory: the gate that admits waiting messages (`taskrunner.queue_flow`).

Each flow key keeps its waiting messages in add order and a *turn*: the gate's sequence
number of its last admission, or of its first waiting message's arrival if it never had
one. A key is in exactly one place:

* the *ring*, a heap by turn, when it has waiting messages and may be admissible;
* *slot-blocked*, when its head's concurrency is used up: it rejoins the ring, with
  its turn unchanged, when one of its admitted messages frees its slot;
* *rate-blocked*, in a heap by the instant GCRA next allows its head's rate key: it
  rejoins the ring when a receive comes at or after that instant;
* *idle*, with no waiting message: it rejoins the ring when one arrives.

So an admission costs O(log keys), whatever the number of blocked keys.

Cancelled messages are dropped lazily: one stays in its key's deque, marked no longer
waiting, until it reaches the head; the gate's `waiting` count is kept exact.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, Literal, Protocol, TypeVar

from taskrunner.queue import Flow, FlowWait

__all__ = ["_FlowGate"]

# Float slack on GCRA's comparison, so an admission exactly one interval later is not
# refused for a rounding error of the interval's sum.
_EPSILON = 1e-9


class _Waiter(Protocol):
    """What the gate reads and sets on a store's message (`store._Message`)."""

    id: str
    added_at: float
    flow: Flow | None
    waiting: bool
    admitted: bool


_Message = TypeVar("_Message", bound=_Waiter)


@dataclass(slots=True)
class _Key(Generic[_Message]):
    name: str
    turn: int
    waiting: deque[_Message] = field(default_factory=deque)
    # Ids of admitted messages of this key not yet at a final outcome or released.
    holders: set[str] = field(default_factory=set)
    place: Literal["ring", "slot", "rate", "idle"] = "idle"


@dataclass(slots=True)
class _FlowGate(Generic[_Message]):
    """The flow keys, rate keys and waiting messages of one memory store."""

    keys: dict[str, _Key[_Message]] = field(default_factory=dict)
    # Theoretical arrival time (monotonic) per rate key.
    tat: dict[str, float] = field(default_factory=dict)
    ring: list[tuple[int, str]] = field(default_factory=list)
    rate_blocked: list[tuple[float, str]] = field(default_factory=list)
    sequence: itertools.count[int] = field(default_factory=itertools.count)
    waiting: int = 0

    def wait(self, message: _Message) -> None:
        """Queue `message` behind its key's waiting messages."""
        flow = message.flow
        assert flow is not None
        key = self.keys.get(flow.key)
        if key is None:
            key = self.keys[flow.key] = _Key(flow.key, next(self.sequence))
        key.waiting.append(message)
        message.admitted = False
        message.waiting = True
        self.waiting += 1
        if key.place == "idle":
            self._to_ring(key)

    def unwait(self, message: _Message) -> None:
        """Take a waiting `message` out (cancelled); its entry is dropped when reached."""
        message.waiting = False
        self.waiting -= 1

    def free(self, message: _Message) -> bool:
        """Give back `message`'s slot if it holds one; True when a key may now admit."""
        if not message.admitted:
            return False
        message.admitted = False
        assert message.flow is not None
        key = self.keys[message.flow.key]
        key.holders.discard(message.id)
        if key.place == "slot":
            self._to_ring(key)
            return True
        return False

    def admit(self, now: float, limit: int) -> list[_Message]:
        """Admit up to `limit` waiting messages at `now`, round-robin across keys."""
        while self.rate_blocked and self.rate_blocked[0][0] <= now + _EPSILON:
            _, name = heapq.heappop(self.rate_blocked)
            key = self.keys.get(name)
            if key is not None and key.place == "rate":
                self._to_ring(key)
        admitted: list[_Message] = []
        while self.ring and len(admitted) < limit:
            turn, name = heapq.heappop(self.ring)
            key = self.keys.get(name)
            if key is None or key.place != "ring" or key.turn != turn:
                continue  # a stale entry: the key moved since it was pushed
            head = self._head(key)
            if head is None:
                key.place = "idle"
                continue
            flow = head.flow
            assert flow is not None
            if flow.concurrency is not None and len(key.holders) >= flow.concurrency:
                key.place = "slot"
                continue
            if flow.rate is not None:
                wake = self._rate_wake(flow, now)
                if wake is not None:
                    key.place = "rate"
                    heapq.heappush(self.rate_blocked, (wake, name))
                    continue
                tat = self.tat.get(flow.rate_counter, now)
                self.tat[flow.rate_counter] = max(tat, now) + 1.0 / flow.rate
            key.waiting.popleft()
            self.waiting -= 1
            head.waiting = False
            head.admitted = True
            key.holders.add(head.id)
            key.turn = next(self.sequence)
            admitted.append(head)
            key.place = "idle"
            if key.waiting:
                self._to_ring(key)
        return admitted

    def next_wake(self) -> float | None:
        """The earliest instant a rate-blocked key may admit again (None: no such key)."""
        while self.rate_blocked:
            wake, name = self.rate_blocked[0]
            key = self.keys.get(name)
            if key is not None and key.place == "rate":
                return wake
            heapq.heappop(self.rate_blocked)
        return None

    def explain(self, message: _Message, now: float, wall: float) -> FlowWait:
        """Why the waiting `message` is not admitted yet (for `lookup`)."""
        flow = message.flow
        assert flow is not None
        key = self.keys[flow.key]
        if flow.concurrency is not None and len(key.holders) >= flow.concurrency:
            return FlowWait(key=flow.key, reason="slot", holders=tuple(sorted(key.holders)))
        wake = self._rate_wake(flow, now) if flow.rate is not None else None
        if wake is not None:
            return FlowWait(
                key=flow.key, reason="rate", until=wall + (wake - now), rate_key=flow.rate_counter
            )
        return FlowWait(key=flow.key, reason="turn")

    def oldest_added_at(self) -> float | None:
        """The add time of the oldest waiting message (O(keys))."""
        heads = (self._head(k) for k in self.keys.values())
        return min((m.added_at for m in heads if m is not None), default=None)

    def clear(self) -> None:
        """Forget every key, slot, rate and waiting message (purge)."""
        self.keys.clear()
        self.tat.clear()
        self.ring.clear()
        self.rate_blocked.clear()
        self.waiting = 0

    def _head(self, key: _Key[_Message]) -> _Message | None:
        while key.waiting and not key.waiting[0].waiting:
            key.waiting.popleft()  # cancelled: already uncounted
        return key.waiting[0] if key.waiting else None

    def _to_ring(self, key: _Key[_Message]) -> None:
        key.place = "ring"
        heapq.heappush(self.ring, (key.turn, key.name))

    def _rate_wake(self, flow: Flow, now: float) -> float | None:
        assert flow.rate is not None
        tat = self.tat.get(flow.rate_counter)
        if tat is None:
            return None
        allowed_at = tat - (flow.burst - 1) / flow.rate
        return allowed_at if allowed_at > now + _EPSILON else None
