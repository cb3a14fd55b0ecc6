"""Leader leases and scheduled fires, in two hashes per queue.

Leadership. One hash ``leaders`` holds each election's lease as ``token|expiry
ms|holder`` (server clock); the field outlives the lease, so a retake after a lapse or
a new holder gets the previous token + 1 and a lapsed lease nobody took still renews.
``fire`` checks the token and the schedule's last instant (hash ``fired``) and XADDs
the body in one script. delete_queue deletes both (tokens then start again at 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taskrunner.queue import FireRecord, LeaderLease
from taskrunner_backends.checks import (
    check_body,
    check_instant,
    check_names,
    check_text,
    check_token,
)

from .arguments import _milliseconds
from .base import QueueBase
from .client import Arg
from .replies import _as_int, _as_str
from .scripts import SCRIPTS

# Tokens go through Lua, whose numbers are doubles: exact below 2**52 only.
_TOKEN_BITS = 52

__all__ = ["LeadershipMixin"]


class LeadershipMixin(QueueBase):
    """Leader leases and scheduled fires (the `Leadership` part)."""

    async def acquire_leadership(
        self, name: str, holder: str, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Take the lease of election `name` for `holder` when it is free or lapsed.

        A live lease of `holder` is renewed with its token. A new lease gets the
        election's previous token + 1 (the record of the last token outlives leases,
        so tokens never repeat). Expiry is on the server's clock, in ms rounded up.

        Raises:
            TypeError: A name is no str, or `ttl_seconds` no number.
            ValueError: `ttl_seconds` <= 0 or not finite, or `name`/`holder` empty.
        """
        check_text("name", name)
        check_text("holder", holder)
        ttl_ms = _milliseconds("ttl_seconds", ttl_seconds, positive=True)
        return _lease(name, await self._leadership("acquire", name, holder, ttl_ms))

    async def renew_leadership(
        self, name: str, holder: str, token: int, *, ttl_seconds: float
    ) -> LeaderLease | None:
        """Extend the lease by `ttl_seconds` from now if `holder` holds it under `token`.

        A lapsed lease renews as long as nobody took it since (the token is still the
        election's latest and the record still names `holder`).
        """
        check_text("name", name)
        check_text("holder", holder)
        check_token(token, bits=_TOKEN_BITS)
        ttl_ms = _milliseconds("ttl_seconds", ttl_seconds, positive=True)
        return _lease(name, await self._leadership("renew", name, holder, token, ttl_ms))

    async def resign_leadership(self, name: str, holder: str, token: int) -> bool:
        """End the lease now if `holder` holds it under `token`; returns whether it did.

        The token stays the election's latest (the next holder gets a larger one);
        the lease can no longer be renewed or resigned.
        """
        check_text("name", name)
        check_text("holder", holder)
        check_token(token, bits=_TOKEN_BITS)
        return _as_int(await self._leadership("resign", name, holder, token)) == 1

    async def current_leader(self, name: str) -> LeaderLease | None:
        """The live lease of election `name`, or None when nobody holds one."""
        check_text("name", name)
        return _lease(name, await self._leadership("current", name))

    async def fire(
        self, *, election: str, token: int, schedule: str, instant: float, body: bytes
    ) -> str | None:
        """Add `body` for `schedule`'s `instant` and record it fired, in one script.

        Nothing is added unless `token` is the election's latest token and `instant`
        is later than the schedule's recorded one. The message is a plain ready entry,
        as `add` writes it.
        """
        check_text("election", election)
        check_text("schedule", schedule)
        check_token(token, bits=_TOKEN_BITS)
        instant = check_instant("instant", instant)
        check_body(body)
        reply = await self._leadership(
            "fire", election, token, schedule, repr(float(instant)), body
        )
        return None if reply is None else _as_str(reply)

    async def fire_records(self, schedules: Sequence[str]) -> dict[str, FireRecord]:
        """The latest fire record of each named schedule that has one."""
        names = list(dict.fromkeys(check_names("schedules", schedules, item="schedule")))
        if not names:
            self._check_open()
            return {}
        reply = await self._leadership("records", *names)
        records = {}
        for name, value in zip(names, reply, strict=True):
            if value is None:
                continue
            instant, _, message_id = _as_str(value).partition(" ")
            records[name] = FireRecord(schedule=name, instant=float(instant), message_id=message_id)
        return records

    async def _leadership(self, op: str, *args: Arg) -> Any:
        await self._ready()
        return await self._raw.run_script(
            f"leadership {op}",
            SCRIPTS["leadership"],
            (self._keys.leaders, self._keys.fired, self._keys.stream),
            (op, *args),
        )


def _lease(name: str, reply: object) -> LeaderLease | None:
    if not reply:
        return None
    assert isinstance(reply, list)
    return LeaderLease(
        name=name,
        holder=_as_str(reply[0]),
        token=_as_int(reply[1]),
        remaining_seconds=max(0, _as_int(reply[2])) / 1000,
    )
