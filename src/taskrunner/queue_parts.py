"""Bases a backend's queue class inherits to offer an optional part without boilerplate.

Each optional part of the contract (`taskrunner.queue`) is read through a property of
the queue: ``admin``, ``worker_registry``, ``consumer_cleanup``, ``scheduling``,
``leadership``, ``results``, ``lookup``, ``browse``, ``queue_names``. A backend whose
queue class implements a part's methods itself inherits the base named after the
property instead of writing it::

    class MyQueue(AdminOnSelf, SchedulingOnSelf, LookupOnSelf):
        contract_version = CONTRACT_VERSION

        async def purge(self) -> int: ...  # and the rest of QueueAdmin
        async def add_requests(self, requests): ...  # and Scheduling.cancel
        async def lookup_messages(self, message_ids): ...  # MessageLookup.lookup

What a base gives, for every part:

* the property: ``queue.admin`` is ``queue``, typed as the part (`QueueAdmin`), as a
  hand-written property would be, so a subclass may still override it with another
  object implementing the part (a wrapper, say);
* a nominal base: each base subclasses the part's protocol, so mypy checks every
  method's signature against the protocol where the class is defined, and refuses to
  instantiate a class that misses one;
* a check when the class is defined: a class that lacks one of the part's methods, or
  implements one with a plain ``def`` where the protocol has ``async def``, raises
  `TypeError` naming each of them. A class that declares abstract methods
  (`abc.abstractmethod`) is checked at its first concrete subclass instead.

List the bases *after* the classes that implement the methods (mixins of your own):
a base carries the protocol's empty declarations, and a declaration earlier in the
method resolution order hides an implementation later in it (the check says so).

Three parts' one method has the property's name (`MessageLookup.lookup`,
`MessageBrowser.browse`, `QueueNames.queue_names`), so the queue cannot be that part
itself: `LookupOnSelf`, `BrowseOnSelf` and `QueueNamesOnSelf` have the class implement
the method under another name (``lookup_messages``, ``browse_messages``,
``list_queue_names``, same signature and contract) and their property returns a small
view forwarding the part's method to it.

Writing the property by hand stays valid (a backend written before these bases, or one
whose part is another object or may be None, as a handle that cannot list names): the
bases are a convenience, not a member of `taskrunner.queue.Queue`.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import msgspec

from taskrunner.queue import (
    BrowsedMessage,
    BrowseState,
    ConsumerCleanup,
    Leadership,
    MessageBrowser,
    MessageLookup,
    MessageState,
    QueueAdmin,
    QueueNameList,
    QueueNames,
    ResultStore,
    Scheduling,
    WorkerRegistry,
    check_body_bytes,
    cut_body,
)
from taskrunner.queue_extensions import takes_body_bytes

__all__ = [
    "AdminOnSelf",
    "BrowseOnSelf",
    "BrowseSource",
    "ConsumerCleanupOnSelf",
    "LeadershipOnSelf",
    "LookupOnSelf",
    "LookupSource",
    "QueueNamesOnSelf",
    "QueueNamesSource",
    "ResultsOnSelf",
    "SchedulingOnSelf",
    "WorkerRegistryOnSelf",
]


class LookupSource(Protocol):
    """What `LookupOnSelf` needs of the queue class: `MessageLookup.lookup`, renamed."""

    async def lookup_messages(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        """See `taskrunner.queue.MessageLookup.lookup`: the same arguments and contract."""
        ...


class BrowseSource(Protocol):
    """What `BrowseOnSelf` needs of the queue class: `MessageBrowser.browse`, renamed."""

    async def browse_messages(
        self, state: BrowseState, *, after: str | None = None, limit: int = 100
    ) -> list[BrowsedMessage]:
        """See `taskrunner.queue.MessageBrowser.browse`: the same arguments and contract.

        It may also take ``body_bytes`` (contract 2.1) to cut the bodies where they are
        stored; without it, ``queue.browse`` cuts the page it returns.
        """
        ...


class QueueNamesSource(Protocol):
    """What `QueueNamesOnSelf` needs of the queue class: `QueueNames.queue_names`, renamed."""

    async def list_queue_names(
        self, *, after: str | None = None, limit: int = 1000
    ) -> QueueNameList:
        """See `taskrunner.queue.QueueNames.queue_names`: the same arguments and contract."""
        ...


def _protocol_members(protocol: type) -> dict[str, object]:
    """The methods `protocol` (and the protocols it extends) declares, by name.

    Read from the classes' own namespaces, so the list is the protocol itself, never a
    copy kept by hand (``typing.get_protocol_members`` is Python 3.13).
    """
    members: dict[str, object] = {}
    for klass in reversed(protocol.__mro__):
        if not getattr(klass, "_is_protocol", False) or klass is Protocol:
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and callable(value):
                members[name] = value
    return members


class _PartOnSelf:
    """The check every ``...OnSelf`` base runs when a class inheriting it is defined."""

    # The protocol whose methods the class must implement; set by each base.
    _part_protocol: ClassVar[type]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("_is_part_base", False) or _declares_abstract(cls):
            return
        problems: list[str] = []
        for base in cls.__mro__:
            if base.__dict__.get("_is_part_base", False):
                problems += _check_part(cls, base.__name__, base.__dict__["_part_protocol"])
        if problems:
            raise TypeError(f"{cls.__qualname__} " + "; ".join(problems))


def _declares_abstract(cls: type) -> bool:
    return any(
        getattr(inspect.getattr_static(cls, name, None), "__isabstractmethod__", False)
        for name in dir(cls)
    )


def _check_part(cls: type, base: str, protocol: type) -> list[str]:
    missing: list[str] = []
    hidden: list[str] = []
    not_async: list[str] = []
    for name, declared in _protocol_members(protocol).items():
        found = inspect.getattr_static(cls, name, None)
        if isinstance(found, staticmethod | classmethod):
            found = found.__func__
        if found is declared or found is None or not callable(found):
            # The protocol's own declaration: nothing implements it, or an implementation
            # further along the MRO is hidden behind the base.
            later = [k for k in cls.__mro__ if name in vars(k) and vars(k)[name] is not declared]
            (hidden if found is declared and later else missing).append(name)
        elif inspect.iscoroutinefunction(declared) and not inspect.iscoroutinefunction(found):
            not_async.append(name)
    problems: list[str] = []
    if missing:
        problems.append(
            f"inherits {base} but does not implement {protocol.__name__}."
            + f", {protocol.__name__}.".join(missing)
        )
    if hidden:
        problems.append(
            f"lists {base} before the base that implements {', '.join(hidden)}: "
            f"{base} carries {protocol.__name__}'s empty declarations, which hide the "
            f"implementation; list {base} after that base"
        )
    if not_async:
        problems.append(
            f"inherits {base} but implements {', '.join(not_async)} with a plain def; "
            f"{protocol.__name__} declares async def"
        )
    return problems


class AdminOnSelf(_PartOnSelf, QueueAdmin):
    """The queue is its own `QueueAdmin`: ``queue.admin`` is the queue."""

    _is_part_base: ClassVar[bool] = True
    _part_protocol: ClassVar[type] = QueueAdmin

    @property
    def admin(self) -> QueueAdmin:
        """This queue: dead letters, purge and delete are implemented."""
        return self


class WorkerRegistryOnSelf(_PartOnSelf, WorkerRegistry):
    """The queue is its own `WorkerRegistry`: ``queue.worker_registry`` is the queue."""

    _is_part_base: ClassVar[bool] = True
    _part_protocol: ClassVar[type] = WorkerRegistry

    @property
    def worker_registry(self) -> WorkerRegistry:
        """This queue: it keeps a registry of live worker processes."""
        return self


class ConsumerCleanupOnSelf(_PartOnSelf, ConsumerCleanup):
    """The queue is its own `ConsumerCleanup`: ``queue.consumer_cleanup`` is the queue."""

    _is_part_base: ClassVar[bool] = True
    _part_protocol: ClassVar[type] = ConsumerCleanup

    @property
    def consumer_cleanup(self) -> ConsumerCleanup:
        """This queue: it forgets unused consumer names on request."""
        return self


class SchedulingOnSelf(_PartOnSelf, Scheduling):
    """The queue is its own `Scheduling`: ``queue.scheduling`` is the queue."""

    _is_part_base: ClassVar[bool] = True
    _part_protocol: ClassVar[type] = Scheduling

    @property
    def scheduling(self) -> Scheduling:
        """This queue: delayed and unique adds and cancellation (as its capabilities say)."""
        return self


class LeadershipOnSelf(_PartOnSelf, Leadership):
    """The queue is its own `Leadership`: ``queue.leadership`` is the queue."""

    _is_part_base: ClassVar[bool] = True
    _part_protocol: ClassVar[type] = Leadership

    @property
    def leadership(self) -> Leadership:
        """This queue: leader leases with fencing tokens and fire-once records."""
        return self


class ResultsOnSelf(_PartOnSelf, ResultStore):
    """The queue is its own `ResultStore`: ``queue.results`` is the queue."""

    _is_part_base: ClassVar[bool] = True
    _part_protocol: ClassVar[type] = ResultStore

    @property
    def results(self) -> ResultStore:
        """This queue: task results by message id, each kept for its TTL."""
        return self


class LookupOnSelf(_PartOnSelf, LookupSource):
    """The queue implements `MessageLookup` as ``lookup_messages``; ``queue.lookup`` forwards.

    The part's method is named ``lookup``, like the property, so the queue cannot be the
    part: the property returns a view whose ``lookup`` calls the queue's
    ``lookup_messages`` (looked up at each call, so a subclass's override counts).
    """

    _is_part_base: ClassVar[bool] = True
    _part_protocol: ClassVar[type] = LookupSource

    @property
    def lookup(self) -> MessageLookup:
        """The state of messages by id (see the queue's `lookup_messages`)."""
        return _LookupView(self)


class BrowseOnSelf(_PartOnSelf, BrowseSource):
    """The queue implements `MessageBrowser` as ``browse_messages``; ``queue.browse`` forwards.

    As `LookupOnSelf`: the part's method has the property's name.
    """

    _is_part_base: ClassVar[bool] = True
    _part_protocol: ClassVar[type] = BrowseSource

    @property
    def browse(self) -> MessageBrowser:
        """Keyset-paged, read-only listings of messages (see the queue's `browse_messages`)."""
        return _BrowseView(self)


class QueueNamesOnSelf(_PartOnSelf, QueueNamesSource):
    """The queue implements `QueueNames` as ``list_queue_names``; ``queue.queue_names`` forwards.

    As `LookupOnSelf`: the part's method has the property's name.
    """

    _is_part_base: ClassVar[bool] = True
    _part_protocol: ClassVar[type] = QueueNamesSource

    @property
    def queue_names(self) -> QueueNames:
        """The names of the queues the backend holds (see the queue's `list_queue_names`)."""
        return _QueueNamesView(self)


class _LookupView:
    """`MessageLookup` over a `LookupSource`."""

    __slots__ = ("_source",)

    def __init__(self, source: LookupSource) -> None:
        self._source = source

    async def lookup(self, message_ids: Sequence[str]) -> list[MessageState | None]:
        return await self._source.lookup_messages(message_ids)


class _BrowseView:
    """`MessageBrowser` over a `BrowseSource`."""

    __slots__ = ("_source",)

    def __init__(self, source: BrowseSource) -> None:
        self._source = source

    async def browse(
        self,
        state: BrowseState,
        *,
        after: str | None = None,
        limit: int = 100,
        body_bytes: int | None = None,
    ) -> list[BrowsedMessage]:
        check_body_bytes(body_bytes)
        method: Any = self._source.browse_messages
        if body_bytes is not None and takes_body_bytes(method):
            # The source cuts the bodies where they are stored (Redis, PostgreSQL).
            page: list[BrowsedMessage] = await method(
                state, after=after, limit=limit, body_bytes=body_bytes
            )
            return page
        page = await method(state, after=after, limit=limit)
        if body_bytes is None:
            return page
        # A source that holds its bodies in memory (or a 2.0 one): cut here.
        return [_cut(message, body_bytes) for message in page]


def _cut(message: BrowsedMessage, body_bytes: int) -> BrowsedMessage:
    body, size = cut_body(message.body, body_bytes)
    if size is None:
        return message
    return msgspec.structs.replace(message, body=body, body_size=size)


class _QueueNamesView:
    """`QueueNames` over a `QueueNamesSource`."""

    __slots__ = ("_source",)

    def __init__(self, source: QueueNamesSource) -> None:
        self._source = source

    async def queue_names(self, *, after: str | None = None, limit: int = 1000) -> QueueNameList:
        return await self._source.list_queue_names(after=after, limit=limit)
