"""Browsing (the ``browse`` part): pages of waiting or in-flight messages.

`browse_messages` pages by stream entry id in one read-only script
(``lua/browse.lua``): waiting entries are one XRANGE after the group's last-delivered
id, in-flight ones one extended XPENDING plus an XRANGE per entry. A page of waiting
ones first moves the delayed messages that are due onto the stream, as a receive does:
they wait as much as the stream's entries do, and the contract lists them. Messages
waiting for flow control's admission are ready too: they are listed after the stream's
waiting entries, in the order they started to wait, under cursors ``w<number>`` (one
ZRANGEBYSCORE of ``f:waiting`` per page).
"""

from __future__ import annotations

import re

from taskrunner.queue import BrowsedMessage, BrowseState, check_browse, cut_body

from .base import QueueBase
from .receipts import _LEASE_SUFFIX, _caller_name, _Message, _parse_entry
from .receiving import PROMOTE_BATCH
from .replies import _as_int, _as_str, _is_stream_id
from .scripts import SCRIPTS

__all__ = ["BrowseMixin"]

# The cursor of a message waiting for flow control's admission: its number in the
# queue's flow order (``f:waiting``). Such messages are listed after the stream's.
_FLOW_CURSOR = re.compile(r"w[0-9]{1,16}")

# The cursor of an entry of a priority's own stream: ``<priority>:<entry id>``. Those
# streams are listed first, highest priority first, then the priority-0 stream.
_LEVEL_CURSOR = re.compile(r"([1-9]):([0-9]{1,20}-[0-9]{1,20})")


class BrowseMixin(QueueBase):
    """`browse_messages`: a page of waiting or in-flight messages, changing none of them."""

    async def browse_messages(
        self,
        state: BrowseState,
        *,
        after: str | None = None,
        limit: int = 100,
        body_bytes: int | None = None,
    ) -> list[BrowsedMessage]:
        """Up to `limit` messages in `state` after cursor `after`, in stream-entry order.

        No group is created, no idle time reset, no delivery counted. The cursor is the
        stream entry id: a released message is a new entry at the end of the stream, so
        it is listed there, under its own message id, with the deliveries it had.
        Waiting: the entries after the group's last-delivered id (all of them before
        any receive), after up to `PROMOTE_BATCH` delayed messages (released or added
        with a delay) whose delay is over were moved onto the stream as a receive moves
        them (one more round trip): a due message is listed at the end, never before
        its delay is over; then the messages waiting for flow control's admission, in the
        order they started to wait (cursor ``w<number>``). In flight: the group's PEL
        from the cursor, with the holder, idle time and lease from its group consumer
        name, the delivery count its entry's base plus the PEL's. An entry that is not
        a taskrunner message is listed with its fields as JSON for a body (receive
        dead-letters it); one whose payload was
        deleted while pending with an empty body. With `body_bytes`, the script cuts
        each entry's body field on the server (``string.sub``), so a page sends about
        ``limit * body_bytes`` bytes however large the bodies; the fields of an entry
        that is not a taskrunner message, listed as evidence, are cut to `body_bytes`
        here (their body field already on the server; ``body_size`` is then the
        evidence's length plus what the server cut, close to what it would be).

        Raises:
            ValueError: See `taskrunner.queue.MessageBrowser.browse`; `after` must be a
                stream id (``<ms>-<seq>``).
        """
        check_browse(state, limit, body_bytes)
        level_cursor = None if after is None else _LEVEL_CURSOR.fullmatch(after)
        if (
            after is not None
            and level_cursor is None
            and not (_is_stream_id(after) or _FLOW_CURSOR.fullmatch(after))
        ):
            raise ValueError(
                f"after must be a stream entry id (ms-seq), a priority's entry "
                f"(<priority>:ms-seq) or a flow cursor (w<number>), got {after!r:.60}"
            )
        await self._ready()
        if state == "waiting":
            await self._raw.run_script(
                "browse",
                SCRIPTS["receive"],
                self._keys.scheduling,
                [self._keys.group, PROMOTE_BATCH, self._keys.flow_prefix],
            )
        held = await self._raw.call("browse", "HGETALL", self._keys.levels)
        # The hash's fields are the levels (a flat list, or a map under RESP3).
        self._learn_levels([_as_int(f) for f in (held if isinstance(held, dict) else held[0::2])])
        # Priorities above 0 first, highest first, each in entry order; then priority 0.
        order = [*self._levels, 0]
        start = 0
        if level_cursor is not None:
            level = int(level_cursor.group(1))
            start = order.index(level) if level in order else len(order) - 1
            after = level_cursor.group(2) if level in order else None
        elif after is not None:
            start = len(order) - 1
        page: list[BrowsedMessage] = []
        for level in order[start:]:
            if len(page) >= limit:
                break
            page.extend(
                await self._browse_level(state, level, after, limit - len(page), body_bytes)
            )
            after = None
        return page

    async def _browse_level(
        self,
        state: BrowseState,
        level: int,
        after: str | None,
        limit: int,
        body_bytes: int | None,
    ) -> list[BrowsedMessage]:
        reply = await self._raw.run_script(
            "browse",
            SCRIPTS["browse"],
            [self._keys.level_stream(level), self._keys.parked],
            [
                self._keys.group,
                state,
                after or "",
                limit,
                "" if body_bytes is None else body_bytes,
                self._keys.flow_prefix,
                "1" if level else "",
            ],
        )
        page = []
        for i in range(0, len(reply), 6):
            entry_id = _as_str(reply[i])
            parsed = _parse_entry(entry_id, reply[i + 1], level)
            cut = reply[i + 5]
            size = None
            if isinstance(parsed, _Message):
                message_id, body, base = parsed.message_id, parsed.body, parsed.base_count
                size = None if cut is None else _as_int(cut)
            else:
                message_id, base = entry_id, 0
                body, size = cut_body(parsed.evidence, body_bytes)
                if cut is not None and body_bytes is not None:
                    # Its body field was cut on the server: about that much more.
                    size = (size or len(parsed.evidence)) + _as_int(cut) - body_bytes
            holder = reply[i + 2]
            consumer = lease = idle = None
            count = base
            if isinstance(holder, bytes):
                name = _as_str(holder)
                consumer = _caller_name(name)
                suffix = _LEASE_SUFFIX.search(name)
                lease = None if suffix is None else int(suffix.group()[1:]) / 1000
                idle = _as_int(reply[i + 3]) / 1000
                count = base + _as_int(reply[i + 4])
            page.append(
                BrowsedMessage(
                    cursor=f"{level}:{entry_id}" if level else entry_id,
                    message_id=message_id,
                    body=body,
                    delivery_count=count,
                    added_at=int(message_id.partition("-")[0]) / 1000,
                    consumer=consumer,
                    idle_seconds=idle,
                    lease_seconds=lease,
                    body_size=size,
                )
            )
        return page
