"""Ready messages in memory, one FIFO per priority level (`AddRequest.priority`).

The next message is the head of the level whose head has the highest *effective*
priority: its level, plus one for every ``aging`` seconds it has been ready, capped at
the top level; a tie goes to the higher level. Only heads age, and within a level the
head is the one ready longest, so a choice costs one look at each of the ten heads.

Cancelled messages stay in their level until they reach its head (removal from the
middle of a deque is O(n)); the caller counts them (``cancelled_ready``) and learns
how many a call skipped.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from taskrunner.queue import PRIORITY_MAX

__all__ = ["_Ready"]


class _Member(Protocol):
    """What the levels read of a store's message."""

    added_at: float


def _levels() -> list[deque[tuple[str, float]]]:
    return [deque() for _ in range(PRIORITY_MAX + 1)]


@dataclass(slots=True)
class _Ready:
    # levels[p]: (message id, monotonic time it became ready), oldest first.
    levels: list[deque[tuple[str, float]]] = field(default_factory=_levels)

    def append(self, message_id: str, priority: int = 0, ready_at: float = 0.0) -> None:
        self.levels[priority].append((message_id, ready_at))

    def extend(self, message_ids: Iterable[str]) -> None:
        """Append each of `message_ids` at level 0 (for tests that reorder a store)."""
        for message_id in message_ids:
            self.append(message_id)

    def remove(self, message_id: str) -> None:
        """Take `message_id` out of its level (O(n); for tests that model broken stores)."""
        for level in self.levels:
            for entry in level:
                if entry[0] == message_id:
                    level.remove(entry)
                    return
        raise ValueError(f"{message_id} is not ready")

    def __len__(self) -> int:
        return sum(len(level) for level in self.levels)

    def __bool__(self) -> bool:
        return any(self.levels)

    def __iter__(self) -> Iterator[str]:
        """Ids from the top level down, each level oldest first (ageing ignored)."""
        for level in reversed(self.levels):
            for message_id, _ in level:
                yield message_id

    def clear(self) -> None:
        for level in self.levels:
            level.clear()

    def skip_gone(self, messages: Mapping[str, _Member]) -> int:
        """Drop gone (cancelled) messages off every level's head; how many were dropped."""
        dropped = 0
        for level in self.levels:
            while level and level[0][0] not in messages:
                level.popleft()
                dropped += 1
        return dropped

    def oldest_added_at(self, messages: Mapping[str, _Member]) -> float | None:
        """The add time of the oldest head (call `skip_gone` first)."""
        return min((messages[level[0][0]].added_at for level in self.levels if level), default=None)

    def pop(
        self, now: float, aging: float | None, messages: Mapping[str, _Member]
    ) -> tuple[str | None, int]:
        """The next message's id (None when all are empty), and how many gone were dropped.

        Gone (cancelled) heads met on the way are dropped in the same pass.
        """
        best: deque[tuple[str, float]] | None = None
        best_rank = -1
        dropped = 0
        for priority, level in enumerate(self.levels):
            while level and level[0][0] not in messages:
                level.popleft()
                dropped += 1
            if not level:
                continue
            rank = priority
            if aging is not None and priority < PRIORITY_MAX:
                waited = max(0.0, now - level[0][1])
                rank = min(PRIORITY_MAX, priority + math.floor(waited / aging))
            if rank >= best_rank:  # a tie goes to the higher level, met later
                best, best_rank = level, rank
        return (None if best is None else best.popleft()[0]), dropped
