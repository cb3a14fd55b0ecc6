"""Data shapes: bodies and dead-letter reasons of every size and character (X30, X31).

A backend moves opaque bytes and keeps reasons whole. The cases feed it the shapes
that break encoders, size limits and text handling: empty and 1 MiB bodies, every
byte value, seeded random binary, reasons of several KiB, non-ASCII, multi-line,
quoted and control-character text. Each must come back exactly, on every path a
message takes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from taskrunner.queue import DeadLetter, Delivery

from ..scenario import ConformanceBase, Scenario, conformance
from .dead_letters import dead_letter_reader, require_dead_letter_reader

__all__ = ["REASONS", "ShapeCases", "body_shapes", "describe_difference"]

MIB = 1 << 20


def body_shapes() -> list[bytes]:
    """Distinct bodies of every awkward shape; the same on every run (seeded)."""
    rng = random.Random(30)
    return [
        b"",
        bytes(range(256)),
        bytes(range(255, -1, -1)) * 3,
        rng.randbytes(MIB),  # exactly 1 MiB
        rng.randbytes(1),
        rng.randbytes(4099),
        rng.randbytes(65537),
        b"\x00" * 17,
        # CRLF, ^Z, ^D, a BOM, an overlong NUL, an encoded surrogate: invalid UTF-8.
        b"\r\n\x1a\x04\x00 \xef\xbb\xbf \xc0\x80 \xed\xa0\x80",
        # Shapes a backend might take for its own framing.
        b'{"b": "not an envelope"}',
        b"b",
        b"*1\r\n$4\r\nPING\r\n",
    ]


def _multibyte(length: int) -> str:
    """`length` characters of 1- to 4-byte UTF-8 text, newlines and NULs mixed in."""
    unit = "é東🚀\n\x00a"
    return (unit * (length // len(unit) + 1))[:length]


def _numbered(length: int) -> str:
    """`length` ASCII characters that say where they are, so any cut shows."""
    text = "".join(f"{i:06d}," for i in range(length // 7 + 1))
    return text[:length]


# What a reason must survive, by what it tests.
REASONS: dict[str, str] = {
    "8 KiB of ASCII": _numbered(8192),
    "8 KiB of multi-byte characters": _multibyte(8192),
    "1025 characters": "r" * 1024 + "!",
    "accents": "Fehler: Größe überschritten: café, naïve, Ångström, ñandú",
    # Decomposed (NFD) next to composed (NFC): a backend must not normalise either.
    "combining marks": "cafe\u0301 / caf\u00e9, A\u030angstro\u0308m",
    # Full-width punctuation on purpose: what CJK text really contains.
    "CJK": "処理に失敗しました：タイムアウト（東京）；재시도 실패；处理失败",  # noqa: RUF001
    "emoji": "💥 boom 🚀🔥 astral: 𝄞 𐍈; joined: 👩‍💻 🏳️‍🌈",
    "newlines": "first line\nsecond line\r\nthird\rfourth\n\n",
    "quotes": "single ' double \" back ` backslash \\ literal \\n %s %(x)s {0} $1 ${x} ;--",
    "NUL and control characters": (
        "nul \x00 bell \x07 backspace \x08 escape \x1b[31m del \x7f c1 \x85\x9f end \x00"
    ),
    "Unicode separators": "line\u2028separator\u2029paragraph \ufeff bom \u200b zero-width",
    "empty": "",
    "whitespace only": "  \t  ",
}


def describe_difference(got: bytes | str, expected: bytes | str) -> str:
    """Where `got` first differs from `expected`, without printing megabytes."""
    if type(got) is not type(expected):
        return f"a {type(got).__name__} came back instead of {type(expected).__name__}"
    common = min(len(got), len(expected))
    at = next((i for i in range(common) if got[i] != expected[i]), common)
    return (
        f"{len(got)} long instead of {len(expected)}; first difference at {at}: "
        f"{got[at : at + 12]!r} instead of {expected[at : at + 12]!r}"
    )


def _check_bodies(
    deliveries: Sequence[Delivery], bodies: Mapping[str, bytes], *, count: int, stage: str
) -> None:
    assert sorted(d.message_id for d in deliveries) == sorted(bodies), (
        f"{stage}: deliveries do not match the messages"
    )
    for delivery in deliveries:
        expected = bodies[delivery.message_id]
        assert isinstance(delivery.body, bytes), f"{stage}: body is {type(delivery.body).__name__}"
        assert delivery.body == expected, (
            f"{stage}: body of {len(expected)} bytes changed: "
            f"{describe_difference(delivery.body, expected)}"
        )
        assert delivery.delivery_count == count, (
            f"{stage}: delivery_count {delivery.delivery_count}, expected {count}"
        )


def _by_original(letters: Sequence[DeadLetter], ids: Sequence[str]) -> dict[str, DeadLetter]:
    found = {letter.original_id: letter for letter in letters}
    missing = [i for i in ids if i not in found]
    assert not missing, f"message(s) {missing} are not in the dead-letter store"
    assert len(letters) == len(found), "a message was dead-lettered twice"
    return found


class ShapeCases(ConformanceBase):
    """X30 and X31."""

    @conformance("X30")
    async def test_bodies_of_every_shape_come_back_byte_identical_on_every_path(
        self, s: Scenario
    ) -> None:
        """0 B, 1 MiB, every byte value, random binary, mixed in one add: exact everywhere.

        Through the first delivery, redelivery after a release, a reclaim (when leases
        lapse), the dead-letter store (when it can be read) and a retry from it (with
        `QueueAdmin`); `len` and `stats` count the 1 MiB message like any other.
        """
        shapes = body_shapes()
        ids = await s.add(shapes)
        bodies = dict(zip(ids, shapes, strict=True))
        assert len(bodies) == len(shapes), f"one add returned duplicate ids {ids}"
        total = len(shapes)
        assert await s.queue.len() == total, "len of a batch with a 1 MiB body"
        stats = await s.queue.stats()
        assert (stats.ready, stats.in_flight, stats.delayed) == (total, 0, 0), stats
        consumer = s.consumer("a")

        first = await s.receive_n(s.queue, consumer, total)
        _check_bodies(first, bodies, count=1, stage="first delivery")
        stats = await s.queue.stats()
        assert (stats.ready, stats.in_flight) == (0, total), stats

        assert await s.queue.release(first) == []
        latest = await s.collect(s.queue, consumer, set(ids))
        _check_bodies(latest, bodies, count=2, stage="redelivery after release")

        if s.requires_heartbeat:
            await s.lapse(s.queue, latest)
            latest = await s.reclaim_ids(s.queue, s.consumer("b"), set(ids))
            _check_bodies(latest, bodies, count=3, stage="reclaim")
        assert await s.queue.len() == total, "len of the redelivered messages"

        assert await s.queue.dead_letter(latest, reason="shapes") == []
        assert await s.queue.len() == 0, "dead-lettered messages are still counted by len"
        assert (await s.queue.stats()).dead == total
        s.boundary(len(shapes))  # each shape exact through every delivery path
        reader = dead_letter_reader(s, await s.open())
        if reader is None:
            return  # The dead letters cannot be read back (see dead_letters.NO_READER).
        letters = _by_original(await reader(), ids)
        for message_id, letter in letters.items():
            assert letter.body == bodies[message_id], (
                f"dead letter of a {len(bodies[message_id])}-byte body: "
                f"{describe_difference(letter.body, bodies[message_id])}"
            )
            assert letter.delivery_count == latest[0].delivery_count, (
                f"dead letter count {letter.delivery_count}, died at {latest[0].delivery_count}"
            )
        admin = s.queue.admin
        if admin is None:
            return
        new_ids = await admin.retry_dead_letters([d.message_id for d in letters.values()])
        assert len(new_ids) == total, f"retry moved {len(new_ids)} of {total} dead letters"
        retried = await s.receive_n(s.queue, consumer, total)
        assert sorted(d.message_id for d in retried) == sorted(new_ids), (
            "the retried messages were not delivered under their new ids"
        )
        # Retry does not say which new id is which message; the bodies are distinct.
        by_body = {d.body: d for d in retried}
        for shape in shapes:
            assert shape in by_body, (
                f"a {len(shape)}-byte body did not survive the dead-letter store and retry"
            )
            assert by_body[shape].delivery_count == 1, "a retried message's count is not 1"
        assert await s.queue.ack(retried) == []
        assert await s.queue.len() == 0, "len after acking the retried messages"

    @conformance("X31")
    async def test_dead_letter_reasons_are_kept_whole_whatever_their_length_or_characters(
        self, s: Scenario
    ) -> None:
        """8 KiB, non-ASCII, newlines, quotes, NUL and control characters, empty: all exact.

        Each message is dead-lettered with its own reason and read back through another
        handle, so nothing cached by the handle that wrote it can stand in for storage.
        """
        read = require_dead_letter_reader(s, await s.open())
        labels = list(REASONS)
        ids = await s.add([label.encode() for label in labels])
        held = {d.message_id: d for d in await s.receive_n(s.queue, s.consumer("a"), len(ids))}
        for message_id, label in zip(ids, labels, strict=True):
            lost = await s.queue.dead_letter([held[message_id]], reason=REASONS[label])
            assert lost == [], f"dead_letter with the {label} reason reported the delivery lost"

        letters = _by_original(await read(), ids)
        for message_id, label in zip(ids, labels, strict=True):
            reason = letters[message_id].reason
            assert reason == REASONS[label], (
                f"the {label} reason was not kept whole: "
                f"{describe_difference(reason, REASONS[label])}"
            )
        s.boundary(len(labels))
