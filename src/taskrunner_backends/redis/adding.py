"""Adding messages: `add`, `add_requests` (delayed and unique adds), `cancel`.

Scheduling (`add_requests`, `cancel`). One script per `ADD_REQUESTS_BATCH` requests,
all sent in one round trip. A ready request is a plain stream entry. A delayed one is
parked like a release with a delay, due at ``due_at * 1000`` or ``now + delay`` in
milliseconds of the server's ``TIME``; its message id is reserved from the queue
stream's own id sequence (``XSETID`` moves the stream's last id past it), so delayed
and plain ids never collide and are never reused, even after a purge. The parked entry
carries that id (``i``) and count 0 (``n``), so its delivery keeps the id and counts 1.
A unique key is its own key ``u:<key>`` in the queue's slot holding the message id
(``PX`` for ``unique_seconds``), checked and set in the add's script; the message
carries the key (field ``u``), release and reclaim carry it along, and ack and dead-
letter free it in the fenced script only if it still names the message (receipts of
such messages say so in their token, so a plain ack reads nothing more). The
``uniques`` index lets purge and delete_queue free them without SCAN. The hash
``moved`` maps every message whose entry id is not its id (delayed adds, released
messages) to where it is now; `cancel` uses it and removes a message only when it is
parked or newer than the group's last-delivered id (never read, so in no PEL), in
one script with the key's release. Plain messages' ack and receive are as before.

Flow control (``AddRequest.flow``, `taskrunner.queue_flow`). A request with a flow is
parked like a delayed one, under a reserved id, its flow in its fields, and waits in
its key's line (``f:q:<key>``, see `keys`) from its due time; `receive` admits it
(``lua/admit.lua``) once its ready messages without a flow are read. A plain request
costs one empty argument more; `add` is unchanged.

Durable enqueue (``durable=replica`` or ``aof``): the adds are followed on the same
connection by ``WAIT 1`` or ``WAITAOF 0 1``, in the same round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taskrunner.errors import BackendUnavailableError
from taskrunner.queue import Added, AddRequest, Flow
from taskrunner_backends.checks import check_bodies, check_ids, check_request, check_requests

from .arguments import _milliseconds
from .base import QueueBase
from .client import Arg, is_no_script
from .errors import translate_errors
from .fencing import FENCED_BATCH
from .replies import _as_int, _as_str, _is_stream_id
from .scripts import SCRIPTS

__all__ = ["ADD_REQUESTS_BATCH", "DURABLE_WAIT_SECONDS", "AddingMixin", "check_relay_ids"]

# Requests per `add_requests` script call (count); one round trip carries them all.
ADD_REQUESTS_BATCH = 500

# How long a durable add waits for a replica's confirmation (seconds) before it raises.
DURABLE_WAIT_SECONDS = 2.0


class AddingMixin(QueueBase):
    """`add`, `add_requests` (delayed and unique adds) and `cancel`."""

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        """Enqueue bodies with one pipelined XADD each (one round trip).

        Returns:
            The stream entry ids, in order.

        Raises:
            TypeError: A body is not `bytes`.
            BackendUnavailableError: The server could not be reached; some bodies may
                have been added.
        """
        bodies = check_bodies(bodies)
        await self._ready()
        if not bodies:
            return []
        commands: list[tuple[Arg, ...]] = [
            ("XADD", self._keys.stream, "*", "b", body) for body in bodies
        ]
        replies = await self._raw.pipeline("add", [*commands, *self._durability()])
        self._check_durable("add", replies[len(commands) :])
        ids = []
        for reply in replies[: len(commands)]:
            if isinstance(reply, Exception):
                with translate_errors("add"):
                    raise reply
            ids.append(_as_str(reply))
        return ids

    async def add_requests(self, requests: Sequence[AddRequest]) -> list[Added]:
        """Add each request's body with its options; one `Added` per request, in order.

        One script per `ADD_REQUESTS_BATCH` requests, all sent in one round trip. Each
        request's unique check and add are atomic. A request without a delay (or due in
        the past) becomes a plain stream entry, as `add` writes it; a delayed one waits
        in the parked stream under an id reserved from the queue stream (so ids never
        collide) and is ready at its due time on the server's clock (``due_at`` and
        ``delay_seconds`` are both converted on the server, in whole milliseconds
        rounded up). A receive blocked meanwhile is woken by the doorbell and delivers
        it at most `DELAYED_LATENESS_SECONDS` late on an idle server. A unique key is a
        key of the queue's slot holding the message id, with ``PX`` when
        ``unique_seconds`` is set (0 holds it not at all).

        Raises:
            TypeError: A request is not an `AddRequest`, or a field has the wrong type.
            ValueError: A duration is negative or not finite, or a unique key is empty
                or not valid UTF-8; nothing is added.
            BackendUnavailableError: The server could not be reached; some of the
                requests may have been added.
        """
        return await self._add_requests(requests, None, 0)

    async def add_relayed(
        self, requests: Sequence[AddRequest], relay_ids: Sequence[str], *, record_seconds: float
    ) -> list[Added]:
        """`add_requests`, idempotent per relay id (an outbox row's id).

        Each request's outcome is recorded under its relay id for `record_seconds`, in
        the same script as the add; a request whose relay id is recorded adds nothing
        and returns the recorded message id with ``added=False``. So an outbox relay
        that wrote rows and died before deleting them sends them again harmlessly.

        Raises:
            ValueError: The lengths differ, a relay id is empty, or `record_seconds`
                is not positive; the errors of `add_requests` otherwise.
        """
        checked = check_requests(requests, flow=True, priorities=True)
        ids = check_relay_ids(relay_ids, len(checked))
        record_ms = _milliseconds("record_seconds", record_seconds, positive=True)
        return await self._add_requests(checked, ids, record_ms)

    async def _add_requests(
        self, requests: Sequence[AddRequest], relay_ids: Sequence[str] | None, record_ms: int
    ) -> list[Added]:
        checked = check_requests(requests, flow=True, priorities=True)
        encoded = [
            (*_encode_request(request), "" if relay_ids is None else relay_ids[index])
            for index, request in enumerate(checked)
        ]
        await self._ready()
        if not encoded:
            return []
        levels = {request.priority for request in checked if request.priority}
        if levels:
            # Before the add: a receive of this handle racing it must read by priority.
            self._learn_levels(levels)
        commands: list[tuple[Arg, ...]] = []
        keys = self._keys.scheduling
        for start in range(0, len(encoded), ADD_REQUESTS_BATCH):
            args: list[Arg] = [
                self._keys.group,
                self._keys.unique_prefix,
                self._keys.relay_prefix,
                record_ms,
                self._keys.flow_prefix,
            ]
            for item in encoded[start : start + ADD_REQUESTS_BATCH]:
                args.extend(item)
            commands.append(("EVALSHA", SCRIPTS["add_requests"].sha, len(keys), *keys, *args))
        wait = self._durability()
        replies = await self._raw.pipeline("add requests", [*commands, *wait])
        waited, replies = replies[len(commands) :], replies[: len(commands)]
        if any(is_no_script(reply) for reply in replies):
            # The server restarted or SCRIPT FLUSH ran: nothing of those calls ran.
            await self._raw.call("add requests", "SCRIPT", "LOAD", SCRIPTS["add_requests"].source)
            again = [i for i, reply in enumerate(replies) if is_no_script(reply)]
            rerun = await self._raw.pipeline("add requests", [*(commands[i] for i in again), *wait])
            waited = rerun[len(again) :]
            for i, reply in zip(again, rerun, strict=True):
                replies[i] = reply
        self._check_durable("add requests", waited)
        added = []
        for reply in replies:
            if isinstance(reply, Exception):
                with translate_errors("add requests"):
                    raise reply
            for i in range(0, len(reply), 2):
                added.append(Added(message_id=_as_str(reply[i]), added=_as_int(reply[i + 1]) == 1))
        return added

    async def cancel(self, message_ids: Sequence[str]) -> list[bool]:
        """Remove ready or delayed messages so they are never delivered; free their keys.

        A ready message is one no receive has read yet (newer than the group's last
        delivered entry); a delayed one waits in the parked stream (delayed adds and
        releases with a delay alike, found through the ``moved`` map). Each removal and
        its key's release happen in one script, so a cancel racing a receive either
        removes the message or finds it delivered, never both.

        Returns:
            One flag per id: True when removed by this call; False when in flight,
            completed, dead, cancelled already, unknown or not an id of this backend.

        Raises:
            TypeError: `message_ids` is a single string, or holds an id that is not a
                str (`taskrunner_backends.checks.check_ids`, as on every backend).
        """
        ids = check_ids(message_ids)
        await self._ready()
        flags = [False] * len(ids)
        valid = [(index, i) for index, i in enumerate(ids) if _is_stream_id(i)]
        for start in range(0, len(valid), FENCED_BATCH):
            chunk = valid[start : start + FENCED_BATCH]
            reply = await self._raw.run_script(
                "cancel",
                SCRIPTS["cancel"],
                self._keys.scheduling,
                (
                    self._keys.group,
                    self._keys.unique_prefix,
                    self._keys.flow_prefix,
                    *(i for _, i in chunk),
                ),
            )
            for (index, _), flag in zip(chunk, reply, strict=True):
                flags[index] = _as_int(flag) == 1
        return flags

    async def record_flow_routes(self, routes: dict[str, str]) -> dict[str, str]:
        """Record each flow key's route here unless it has one; the route each key has.

        A `PartitionedQueue` calls it on each flow key's own shard (``f:route``) before
        adding, so one key's messages never go to two shards. Check and record are
        one script, so of two racing adds with different routes one records its route.
        """
        await self._ready()
        keys = list(routes)
        reply = await self._script(
            "add requests",
            "flow_route",
            (f"{self._keys.flow_prefix}route",),
            [item for key in keys for item in (key, routes[key])],
        )
        return {key: _as_str(route) for key, route in zip(keys, reply, strict=True)}

    def _durability(self) -> list[tuple[Arg, ...]]:
        """The command that waits for a replica, sent after an add on the same connection."""
        timeout_ms = round(DURABLE_WAIT_SECONDS * 1000)
        if self._durable == "replica":
            return [("WAIT", 1, timeout_ms)]
        if self._durable == "aof":
            return [("WAITAOF", 0, 1, timeout_ms)]
        return []

    def _check_durable(self, action: str, replies: list[Any]) -> None:
        if not replies:
            return
        (reply,) = replies
        if isinstance(reply, Exception):
            with translate_errors(action):
                raise reply
        confirmed = _as_int(reply[1]) if isinstance(reply, list) else _as_int(reply)
        if confirmed < 1:
            kind = "written to its AOF" if self._durable == "aof" else "received"
            raise BackendUnavailableError(
                f"{action}: no replica {kind} the messages within {DURABLE_WAIT_SECONDS:g}s "
                "(durable enqueue); they are on the master and may or may not survive a "
                "failover: adding them again may duplicate them"
            )


def check_relay_ids(relay_ids: Sequence[str], count: int) -> list[str]:
    """`relay_ids` as a list, one non-empty str per request; else TypeError/ValueError."""
    if isinstance(relay_ids, str):
        raise TypeError("relay_ids must be a sequence of str, not a single string")
    ids: list[object] = list(relay_ids)
    if len(ids) != count:
        raise ValueError(f"relay_ids has {len(ids)} ids for {count} requests")
    checked = []
    for relay_id in ids:
        if not isinstance(relay_id, str) or not relay_id:
            raise ValueError(f"a relay id must be a non-empty str, got {relay_id!r}")
        checked.append(relay_id)
    return checked


def _encode_request(request: AddRequest) -> tuple[Arg, Arg, Arg, Arg, Arg, Arg]:
    """The six script arguments of one request (the relay id follows), every field checked.

    The partitioned queue calls it to check a whole batch before any shard adds.
    """
    check_request(request)
    mode: str = "r"
    value: Arg = ""
    delay_ms = _milliseconds("delay_seconds", request.delay_seconds, positive=False)
    if request.due_at is not None:
        # Converted to ms on the server (its clock decides what is past).
        mode, value = "a", repr(float(request.due_at))
    elif delay_ms > 0:
        mode, value = "d", delay_ms
    if request.priority:
        # The digit after the mode names the priority stream (lua/add_requests.lua).
        mode = f"{mode}{request.priority}"
    key: Arg = ""
    unique_ms: Arg = ""
    if request.unique_key is not None:
        key = request.unique_key
    if request.unique_seconds is not None:
        unique_ms = _milliseconds("unique_seconds", request.unique_seconds, positive=False)
    return (mode, value, key, unique_ms, request.body, _encode_flow(request.flow))


def _encode_flow(flow: Flow | None) -> bytes:
    """A flow as ``lua/add_requests.lua`` reads it: its five fields joined by NUL.

    A key holds no NUL (`taskrunner.queue_flow.check_flow`); an absent value is empty.
    """
    if flow is None:
        return b""
    rate = "" if flow.rate is None else repr(float(flow.rate))
    parts = [
        flow.key,
        "" if flow.concurrency is None else str(flow.concurrency),
        rate,
        "" if flow.rate is None else str(flow.burst),
        flow.rate_key or "",
    ]
    return "\0".join(parts).encode("utf-8")
