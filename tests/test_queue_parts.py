"""The `taskrunner.queue_parts` bases: the property, the check at class definition, old backends.

The typing side (mypy types ``queue.admin`` as the part, checks signatures where the
class is defined, refuses to instantiate a class missing a method) is in
tests/typing/cases_parts.py.
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Sequence
from typing import Any

import pytest

from taskrunner.queue import (
    ConsumerCleanup,
    Leadership,
    MessageState,
    QueueAdmin,
    QueueNameList,
    ResultStore,
    Scheduling,
    WorkerRegistry,
    browse_of,
    leadership_of,
    lookup_of,
    names_of,
    results_of,
    scheduling_of,
)
from taskrunner.queue_parts import (
    AdminOnSelf,
    BrowseOnSelf,
    BrowseSource,
    ConsumerCleanupOnSelf,
    LeadershipOnSelf,
    LookupOnSelf,
    LookupSource,
    QueueNamesOnSelf,
    QueueNamesSource,
    ResultsOnSelf,
    SchedulingOnSelf,
    WorkerRegistryOnSelf,
)
from taskrunner_backends.memory import InMemoryQueue

# Each base, the protocol whose methods it requires, and the property it provides.
BASES: list[tuple[type, type, str]] = [
    (AdminOnSelf, QueueAdmin, "admin"),
    (WorkerRegistryOnSelf, WorkerRegistry, "worker_registry"),
    (ConsumerCleanupOnSelf, ConsumerCleanup, "consumer_cleanup"),
    (SchedulingOnSelf, Scheduling, "scheduling"),
    (LeadershipOnSelf, Leadership, "leadership"),
    (ResultsOnSelf, ResultStore, "results"),
    (LookupOnSelf, LookupSource, "lookup"),
    (BrowseOnSelf, BrowseSource, "browse"),
    (QueueNamesOnSelf, QueueNamesSource, "queue_names"),
]


def methods_of(protocol: type) -> list[str]:
    """The protocol's methods, read with inspect (not the way queue_parts reads them)."""
    return [name for name, _ in inspect.getmembers(protocol, inspect.isfunction) if name[0] != "_"]


def implementation(protocol: type, *, leave_out: str = "", plain: str = "") -> dict[str, Any]:
    """A class namespace with an async method per member of `protocol` but `leave_out`."""

    async def method(self: object, *args: object, **kwargs: object) -> None:
        return None

    def plain_method(self: object, *args: object, **kwargs: object) -> None:
        return None

    return {
        name: plain_method if name == plain else method
        for name in methods_of(protocol)
        if name != leave_out
    }


@pytest.mark.parametrize(("base", "protocol", "prop"), BASES, ids=[b.__name__ for b, _, _ in BASES])
def test_a_class_with_every_method_gets_the_property(base: type, protocol: type, prop: str) -> None:
    queue_class = type("Complete", (base,), implementation(protocol))
    queue = queue_class()

    part = getattr(queue, prop)

    if prop in ("lookup", "browse", "queue_names"):
        assert part is not queue
        assert inspect.iscoroutinefunction(getattr(part, prop))
    else:
        assert part is queue


@pytest.mark.parametrize(
    ("base", "protocol", "missing"),
    [(b, p, name) for b, p, _ in BASES for name in methods_of(p)],
    ids=[f"{b.__name__}-{name}" for b, p, _ in BASES for name in methods_of(p)],
)
def test_a_missing_method_is_a_type_error_naming_it(
    base: type, protocol: type, missing: str
) -> None:
    with pytest.raises(TypeError) as caught:
        type("Incomplete", (base,), implementation(protocol, leave_out=missing))

    head = f"Incomplete inherits {base.__name__} but does not implement "
    assert str(caught.value) == head + f"{protocol.__name__}.{missing}"


def test_every_missing_method_of_every_base_is_named_at_once() -> None:
    with pytest.raises(TypeError) as caught:

        class Empty(AdminOnSelf, LookupOnSelf):
            pass

    message = str(caught.value)
    for name in methods_of(QueueAdmin):
        assert f"QueueAdmin.{name}" in message
    assert "LookupSource.lookup_messages" in message


def test_a_plain_def_where_the_part_declares_async_def_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"implements purge with a plain def; QueueAdmin"):
        type("Sync", (AdminOnSelf,), implementation(QueueAdmin, plain="purge"))


def test_a_static_or_class_method_counts_by_the_function_it_wraps() -> None:
    namespace = implementation(QueueAdmin)
    purge = namespace["purge"]
    namespace["purge"] = staticmethod(purge)
    namespace["delete_queue"] = classmethod(namespace["delete_queue"])

    assert type("Wrapped", (AdminOnSelf,), namespace)().admin is not None

    namespace["purge"] = staticmethod(lambda: 0)
    with pytest.raises(TypeError, match=r"implements purge with a plain def"):
        type("WrappedSync", (AdminOnSelf,), namespace)


def test_a_base_listed_before_the_implementing_mixin_is_a_type_error_saying_so() -> None:
    mixin = type("AdminMixin", (), implementation(QueueAdmin))

    with pytest.raises(TypeError, match=r"lists AdminOnSelf before the base that implements"):
        type("Misordered", (AdminOnSelf, mixin), {})

    assert type("Ordered", (mixin, AdminOnSelf), {})().admin is not None


def test_a_class_with_abstract_methods_is_checked_at_its_first_concrete_subclass() -> None:
    class Base(AdminOnSelf):
        @abc.abstractmethod
        def connect(self) -> None: ...

    with pytest.raises(TypeError, match="Incomplete inherits AdminOnSelf"):

        class Incomplete(Base):
            def connect(self) -> None: ...

    concrete = type("Concrete", (Base,), {**implementation(QueueAdmin), "connect": lambda s: None})
    assert concrete().admin is not None


async def test_the_views_forward_to_the_renamed_methods_as_the_class_defines_them() -> None:
    seen: list[tuple[str, object]] = []

    class Parts(LookupOnSelf, BrowseOnSelf, QueueNamesOnSelf):
        async def lookup_messages(self, message_ids: Sequence[str]) -> list[MessageState | None]:
            seen.append(("lookup", tuple(message_ids)))
            return [None] * len(message_ids)

        async def browse_messages(
            self, state: Any, *, after: str | None = None, limit: int = 100
        ) -> list[Any]:
            seen.append(("browse", (state, after, limit)))
            return []

        async def list_queue_names(
            self, *, after: str | None = None, limit: int = 1000
        ) -> QueueNameList:
            seen.append(("names", (after, limit)))
            return QueueNameList(names=("a",), complete=True)

    class Override(Parts):
        async def lookup_messages(self, message_ids: Sequence[str]) -> list[MessageState | None]:
            seen.append(("override", tuple(message_ids)))
            return []

    queue = Parts()
    assert await queue.lookup.lookup(["1", "2"]) == [None, None]
    assert await queue.browse.browse("in_flight", after="7", limit=3) == []
    assert await queue.browse.browse("waiting") == []
    assert await queue.queue_names.queue_names(after="x", limit=5) == QueueNameList(
        names=("a",), complete=True
    )
    assert await Override().lookup.lookup(["3"]) == []

    assert seen == [
        ("lookup", ("1", "2")),
        ("browse", ("in_flight", "7", 3)),
        ("browse", ("waiting", None, 100)),
        ("names", ("x", 5)),
        ("override", ("3",)),
    ]


class _HandWritten:
    """A backend written before the bases: its own properties, parts of its own."""

    def __init__(self) -> None:
        self.scheduling_part = object()
        self.lookup_part = object()

    @property
    def admin(self) -> QueueAdmin | None:
        return None

    @property
    def scheduling(self) -> object:
        return self.scheduling_part

    @property
    def lookup(self) -> object:
        return self.lookup_part


def test_a_backend_writing_its_own_properties_keeps_working() -> None:
    queue: Any = _HandWritten()

    assert scheduling_of(queue) is queue.scheduling_part
    assert lookup_of(queue) is queue.lookup_part
    assert queue.admin is None
    assert (leadership_of(queue), results_of(queue), browse_of(queue), names_of(queue)) == (
        None,
        None,
        None,
        None,
    )


def test_a_subclass_may_still_override_a_property_the_base_provides() -> None:
    wrapped = object()

    class Wrapping(InMemoryQueue):
        @property
        def scheduling(self) -> Scheduling:
            return wrapped  # type: ignore[return-value]  # a stand-in is enough here

    assert scheduling_of(Wrapping()) is wrapped


async def test_the_memory_queue_is_its_parts_and_forwards_lookup_and_browse() -> None:
    queue = InMemoryQueue()
    [message_id] = await queue.add([b"x"])

    assert queue.admin is queue
    assert queue.worker_registry is queue
    assert queue.consumer_cleanup is queue
    assert (scheduling_of(queue), leadership_of(queue), results_of(queue)) == (queue,) * 3
    [state] = await queue.lookup.lookup([message_id])
    assert state is not None
    assert state.state == "ready"
    [listed] = await queue.browse.browse("waiting")
    assert listed.message_id == message_id
    assert names_of(queue) is None  # a handle built directly belongs to no named store
    await queue.aclose()
