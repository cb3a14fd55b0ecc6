"""Reading a backend's dead letters, and the wall clock their ``dead_at`` is judged on.

Dead letters are read through `Queue.admin` (`QueueAdmin.list_dead_letters`) when the
backend offers it, else through the harness's ``dead_letters`` hook
(`taskrunner_conformance.harness.ReadsDeadLetters`). With neither, nothing can read
a dead letter back: the suite can still check that a dead-lettered message is counted
by ``stats.dead`` and never delivered again (P26), but not that it kept its body,
reason, delivery count and time, and those checks are skipped with that reason.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest

from taskrunner.queue import DeadLetter, Queue

from ..harness import ReadsDeadLetters
from ..scenario import Scenario

__all__ = [
    "LIST_ALL",
    "NO_READER",
    "DeadLetterReader",
    "dead_letter_reader",
    "require_dead_letter_reader",
    "wall_time",
    "wall_tolerance",
]

# A `list_dead_letters` limit above anything a test creates: "all of them".
LIST_ALL = 10_000

NO_READER = (
    "queue.admin is None and the harness has no dead_letters hook: dead letters cannot be "
    "read back, so their bodies, reasons, counts and times go unchecked (that they are "
    "counted by stats.dead and never delivered again is checked by P26)"
)

# How far a server's wall clock may be from ours (seconds) on real time; the fake clock
# of a harness is exact.
WALL_SKEW_SECONDS = 1.0

DeadLetterReader = Callable[[], Awaitable[list[DeadLetter]]]


def dead_letter_reader(s: Scenario, queue: Queue | None = None) -> DeadLetterReader | None:
    """A reader of every dead letter, oldest first, through `queue`; None if unreadable."""
    handle = queue or s.queue
    admin = handle.admin
    if admin is not None:

        async def through_admin() -> list[DeadLetter]:
            return await admin.list_dead_letters(limit=LIST_ALL)

        return through_admin
    harness = s.harness
    if isinstance(harness, ReadsDeadLetters):

        async def through_hook() -> list[DeadLetter]:
            return await harness.dead_letters(handle)

        return through_hook
    return None


def require_dead_letter_reader(s: Scenario, queue: Queue | None = None) -> DeadLetterReader:
    """`dead_letter_reader`, skipping the test when there is none."""
    reader = dead_letter_reader(s, queue)
    if reader is None:
        pytest.skip(NO_READER)
    return reader


def wall_time(s: Scenario) -> float:
    """The wall-clock time (Unix seconds) the backend stamps: the harness clock's, else ours."""
    return s.clock.time() if s.clock is not None else time.time()


def wall_tolerance(s: Scenario) -> float:
    """How far a wall-clock stamp may be outside the window the test measured."""
    skew = 0.0 if s.time_mode == "clock" else WALL_SKEW_SECONDS
    return skew + s.precision + 1e-6
