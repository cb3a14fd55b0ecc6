"""Typing cases for the `taskrunner.queue_parts` bases, checked by mypy (see test_typing.py).

A queue class inheriting a base still satisfies `Queue`; the property is typed as the
part; a method whose signature differs from the part's is reported where the class is
defined (``override``), and a class missing one cannot be instantiated (``abstract``).
A backend writing its own properties, as before the bases, type-checks unchanged.
Never imported: the classes below that miss a method raise TypeError when defined.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_type

from taskrunner.queue import (
    DeadLetter,
    MessageLookup,
    MessageState,
    Queue,
    QueueAdmin,
    Scheduling,
    scheduling_of,
)
from taskrunner.queue_parts import AdminOnSelf, LookupOnSelf
from taskrunner_backends.memory import InMemoryQueue


class AdminMethods:
    async def list_dead_letters(self, *, limit: int = 100) -> list[DeadLetter]:
        return []

    async def retry_dead_letters(self, message_ids: Sequence[str] | None = None) -> list[str]:
        return []

    async def purge_dead_letters(self, message_ids: Sequence[str] | None = None) -> int:
        return 0

    async def purge(self) -> int:
        return 0

    async def delete_queue(self) -> None:
        return None


class Parts(AdminMethods, AdminOnSelf, LookupOnSelf):
    async def lookup_messages(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        return []

    def backend_only(self) -> int:
        return 1


parts = Parts()
assert_type(parts.admin, QueueAdmin)
assert_type(parts.lookup, MessageLookup)
parts.admin.backend_only()  # type: ignore[attr-defined]


def needs_queue(queue: Queue) -> None: ...


memory = InMemoryQueue()
needs_queue(memory)
assert_type(memory.admin, QueueAdmin)
assert_type(memory.scheduling, Scheduling)
assert_type(memory.lookup, MessageLookup)


class WrongSignature(AdminMethods, AdminOnSelf):
    async def purge(self, everything: bool) -> int:  # type: ignore[override]
        return 0


class MissingMethod(AdminOnSelf):
    async def purge(self) -> int:
        return 0


MissingMethod()  # type: ignore[abstract]


class WrongLookup(LookupOnSelf):
    async def lookup_messages(self, message_ids: int) -> None:  # type: ignore[override]
        return None


class HandWritten(InMemoryQueue):
    """A subclass wrapping a part in its own object, as the broken test backends do."""

    @property
    def scheduling(self) -> Scheduling:
        return super().scheduling


needs_queue(HandWritten())
assert_type(scheduling_of(HandWritten()), Scheduling | None)
