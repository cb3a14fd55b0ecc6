"""Result TTLs and rewrites of the ResultStore part, at their edges (X60, X61).

TTLs are probed at their edges with `taskrunner_conformance.edges`: a result is
returned below ``ttl - p`` and gone above ``ttl + p``, counted from its latest write.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from taskrunner.queue import ResultStore, ResultWrite

from ..edges import Edges, Mark, Spec, Subject, Wording, check_edges, conclusively
from ..scenario import ConformanceBase, Scenario, conformance
from .result_calls import check_stored, get_results, put_results, show_body

__all__ = ["ResultTtlCases"]

# Results written in one batch to expire at one instant (X60): more than a backend that
# sweeps expired entries in bounded steps clears in one call.
_MANY = 1000

# Bodies of every shape a task's encoded result may take.
_SHAPES: dict[str, bytes] = {
    "an empty body": b"",
    "one NUL byte": b"\x00",
    "every byte value": bytes(range(256)),
    "bytes that are not UTF-8": b"\xff\xfe\xc3\x28 \xa0\xa1",
    "a body that looks like msgpack": b"\x82\xa1a\x01\xa1b\xc0",
    "1 MiB of random bytes": random.Random(60).randbytes(1 << 20),
}


class _ResultTrial:
    """Results written by ``how``, each under its own id; probed by get_results elsewhere.

    ``how``: ``put`` (one write with ttl ``edge``); ``rewrite`` (written with ttl
    ``edge``, written again ``lead`` later with ttl ``edge`` and a new body: the TTL
    restarts); ``shorter`` (written with a TTL of fifty edges, rewritten ``lead`` later
    with ttl ``edge``: the later TTL replaces the longer one); ``batch`` (one batch
    writes the id with fifty edges of TTL, then with ttl ``edge``: the later write
    wins). Whatever the probe reads must be the latest body.
    """

    wording = Wording("was gone", "was still returned", "time since its latest write")

    def __init__(self, s: Scenario, edges: Edges, writer: ResultStore, reader: ResultStore) -> None:
        self.s = s
        self.edges = edges
        self.writer = writer
        self.reader = reader
        self.bodies: dict[str, bytes] = {}

    async def make(self, spec: Spec) -> Subject:
        edges = self.edges
        message_id = f"result-{len(self.bodies)}-{spec.how}"
        body = f"{spec.how} {spec.edge:g} latest".encode()
        old = f"{spec.how} {spec.edge:g} earlier".encode()
        mark: Mark
        if spec.how == "batch":
            writes = [
                ResultWrite(message_id=message_id, body=old, ttl_seconds=50 * spec.edge),
                ResultWrite(message_id=message_id, body=body, ttl_seconds=spec.edge),
            ]
            _, mark = await edges.timed(put_results(self.writer, writes))
        elif spec.how in ("rewrite", "shorter"):
            first_ttl = spec.edge if spec.how == "rewrite" else 50 * spec.edge
            _, first = await edges.timed(
                put_results(
                    self.writer,
                    [ResultWrite(message_id=message_id, body=old, ttl_seconds=first_ttl)],
                )
            )
            await edges.wait_until(first.end + spec.lead)
            (seen,) = await get_results(self.reader, [message_id])
            assert seen == old, (
                f"{spec.label}: {spec.lead:g}s after the first write get_results answered "
                f"{show_body(seen)}, not its body"
            )
            _, mark = await edges.timed(
                put_results(
                    self.writer,
                    [ResultWrite(message_id=message_id, body=body, ttl_seconds=spec.edge)],
                )
            )
        else:
            _, mark = await edges.timed(
                put_results(
                    self.writer,
                    [ResultWrite(message_id=message_id, body=body, ttl_seconds=spec.edge)],
                )
            )
        self.bodies[message_id] = body
        return Subject(message_id, spec, mark)

    async def probe(self, pending: Sequence[Subject]) -> set[str]:
        keys = [x.key for x in pending]
        got = await get_results(self.reader, keys)
        gone = set()
        for subject, body in zip(pending, got, strict=True):
            if body is None:
                gone.add(subject.key)
                continue
            assert body == self.bodies[subject.key], (
                f"{subject.spec.label}: get_results answered {show_body(body)}, not the latest "
                f"body {show_body(self.bodies[subject.key])}"
            )
        return gone


class ResultTtlCases(ConformanceBase):
    """X60, X61."""

    # -- X60: bodies and TTLs ----------------------------------------------------------------

    @conformance("X60")
    async def test_stored_result_is_returned_byte_for_byte_until_its_ttl_has_passed_and_not_after(
        self, s: Scenario
    ) -> None:
        """Results of several TTLs, written together, probed just before and after each TTL.

        On a fake clock the TTLs are 0.25, 1 and 2.7 s and fractions of the lease, far
        from time zero; read through another handle than the writer's.
        """
        s.require_results()
        edges = Edges(s)
        lease = s.lease
        ttls = (
            [0.25, 1.0, 2.7, 0.37 * lease, 1.6 * lease]
            if edges.exact
            else [0.3 * lease, 0.6 * lease]
        )
        specs = [Spec(ttl, f"a result with a TTL of {ttl:g}s", "put") for ttl in ttls]

        async def open_trial() -> _ResultTrial:
            namespace = s.other_namespace()
            writer = s.require_results(await s.open(namespace))
            reader = s.require_results(await s.open(namespace))
            return _ResultTrial(s, edges, writer, reader)

        await check_edges(s, edges, open_trial, specs)

    @conformance("X60")
    async def test_result_bodies_of_every_shape_come_back_byte_for_byte(self, s: Scenario) -> None:
        """Empty, NUL, every byte value, non-UTF-8, msgpack-like and 1 MiB bodies, in one batch.

        Read back by get_results and wait_result through another handle, each body exact
        and of type bytes.
        """
        writer = s.require_results()
        reader = s.require_results(await s.open())
        ttl = 100 * s.lease
        ids = {label: f"shape-{n}" for n, label in enumerate(_SHAPES)}
        await put_results(
            writer,
            [
                ResultWrite(message_id=ids[label], body=body, ttl_seconds=ttl)
                for label, body in _SHAPES.items()
            ],
        )
        await check_stored(
            reader, {ids[label]: body for label, body in _SHAPES.items()}, "after one batch"
        )
        for label, body in _SHAPES.items():
            waited = await asyncio.wait_for(
                reader.wait_result(ids[label], timeout_seconds=ttl), s.grace
            )
            assert type(waited) is bytes, f"wait_result of {label} returned {waited!r}"
            assert waited == body, f"wait_result of {label} returned {show_body(waited)}"
        s.boundary(len(_SHAPES))

    @conformance("X60")
    async def test_many_results_expiring_at_the_same_time_are_all_gone_after_their_ttl(
        self, s: Scenario
    ) -> None:
        """1,000 results of one TTL in one batch: all returned at half the TTL, none after it + p.

        Read through another handle, twice after the TTL; a result with a long TTL from
        the same batch is still returned. A backend that drops expired results only in
        bounded sweeps, and answers whatever a sweep has not reached yet, fails.
        """
        writer = s.require_results()
        reader = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        ttl = 0.5 * s.lease
        tries = 0

        async def attempt() -> float | None:
            nonlocal tries
            tries += 1
            ids = [f"many-{tries}-{i}" for i in range(_MANY)]
            kept = f"kept-{tries}"
            writes = [ResultWrite(message_id=i, body=i.encode(), ttl_seconds=ttl) for i in ids]
            writes.append(ResultWrite(message_id=kept, body=b"kept", ttl_seconds=100 * s.lease))
            _, mark = await edges.timed(put_results(writer, writes))
            await edges.wait_until(mark.start + ttl / 2)
            got = await get_results(reader, ids)
            high = s.now() - mark.start
            if not edges.certainly_before(ttl, high):
                return high - (ttl - s.precision)
            missing = [i for i, body in zip(ids, got, strict=True) if body != i.encode()]
            assert not missing, (
                f"{len(missing)} of {_MANY} results written together were not returned "
                f"{high:.4f}s into their TTL of {ttl:g}s, e.g. {missing[:3]}"
            )
            await edges.wait_until(mark.end + edges.after(ttl))
            for read in ("first", "second"):
                got = await get_results(reader, [*ids, kept])
                left = [i for i, body in zip(ids, got, strict=False) if body is not None]
                assert not left, (
                    f"{len(left)} of {_MANY} results written together with a TTL of {ttl:g}s "
                    f"were still returned by the {read} read {edges.after(ttl):g}s after "
                    f"their write, e.g. {left[:3]}"
                )
                assert got[-1] == b"kept", (
                    f"a result with a long TTL answered {show_body(got[-1])} by the {read} read"
                )
            return None

        await conclusively(edges, f"{_MANY} results expiring at once", attempt)

    @conformance("X60")
    async def test_expired_result_is_gone_for_every_reader(self, s: Scenario) -> None:
        """After its TTL: get_results and wait_result(timeout 0) answer None, on every handle.

        A TTL far below the precision (0.1 ms) is valid: accepted, and gone after ``p``.
        """
        writer = s.require_results()
        reader = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        ttl = 0.25 * s.lease
        tiny = 1e-4
        await put_results(
            writer,
            [
                ResultWrite(message_id="expires", body=b"short-lived", ttl_seconds=ttl),
                ResultWrite(message_id="tiny", body=b"tiny TTL", ttl_seconds=tiny),
                ResultWrite(message_id="stays", body=b"kept", ttl_seconds=100 * s.lease),
            ],
        )
        await s.advance(edges.after(ttl))
        await check_stored(
            reader,
            {"expires": None, "tiny": None, "stays": b"kept"},
            f"{edges.after(ttl):g}s after writes with TTLs of {ttl:g}s and {tiny:g}s",
        )
        for message_id in ("expires", "tiny"):
            waited = await asyncio.wait_for(
                reader.wait_result(message_id, timeout_seconds=0), s.grace
            )
            assert waited is None, f"wait_result of an expired result returned {show_body(waited)}"
            again = await asyncio.wait_for(
                writer.wait_result(message_id, timeout_seconds=0), s.grace
            )
            assert again is None, "the writer's handle still returned an expired result"
        s.boundary(3)

    # -- X61: rewrites -------------------------------------------------------------------------

    @conformance("X61")
    async def test_later_write_of_one_message_id_replaces_the_earlier_one_and_restarts_its_ttl(
        self, s: Scenario
    ) -> None:
        """Rewritten with the same TTL, with a shorter one, and twice in one batch.

        Probed from the later write: a TTL still counted from the first write is gone at
        the "before" probe, one that keeps the longer TTL is still there at the "after"
        one, and a first-write-wins batch keeps the earlier body.
        """
        s.require_results()
        edges = Edges(s)
        lease = s.lease
        p = s.precision
        # The rewrite comes later than the first TTL's "after" allowance is wide, so the
        # "before" probe of the restarted TTL lies past where the first one ended.
        lead = 0.3 * lease if edges.exact else max(0.25 * lease, 3 * p + 3 * edges.slack)
        specs = [
            Spec(
                0.5 * lease,
                f"a result of TTL {0.5 * lease:g}s rewritten {lead:g}s later with the same TTL",
                "rewrite",
                lead,
            ),
            Spec(
                0.4 * lease,
                f"a result of TTL {20 * lease:g}s rewritten {0.1 * lease:g}s later with a TTL "
                f"of {0.4 * lease:g}s",
                "shorter",
                0.1 * lease,
            ),
            Spec(
                0.3 * lease,
                f"a result written twice in one batch, last with a TTL of {0.3 * lease:g}s",
                "batch",
            ),
        ]

        async def open_trial() -> _ResultTrial:
            namespace = s.other_namespace()
            writer = s.require_results(await s.open(namespace))
            reader = s.require_results(await s.open(namespace))
            return _ResultTrial(s, edges, writer, reader)

        await check_edges(s, edges, open_trial, specs)

    @conformance("X61")
    async def test_later_write_through_another_handle_or_later_in_a_batch_wins(
        self, s: Scenario
    ) -> None:
        """Three writes of one id in a batch; a rewrite by another handle; a shorter body.

        The latest body is returned whole, never a mix: a 1 MiB body rewritten by an
        empty one and back.
        """
        first = s.require_results()
        second = s.require_results(await s.open())
        ttl = 100 * s.lease
        big = _SHAPES["1 MiB of random bytes"]
        await put_results(
            first,
            [
                ResultWrite(message_id="m", body=b"one", ttl_seconds=ttl),
                ResultWrite(message_id="other", body=b"other", ttl_seconds=ttl),
                ResultWrite(message_id="m", body=b"two", ttl_seconds=ttl),
                ResultWrite(message_id="m", body=b"three", ttl_seconds=ttl),
            ],
        )
        await check_stored(second, {"m": b"three", "other": b"other"}, "after one batch")
        await put_results(second, [ResultWrite(message_id="m", body=big, ttl_seconds=ttl)])
        await check_stored(
            first, {"m": big, "other": b"other"}, "after a rewrite by another handle"
        )
        await put_results(first, [ResultWrite(message_id="m", body=b"", ttl_seconds=ttl)])
        await check_stored(
            second, {"m": b"", "other": b"other"}, "after a rewrite with an empty body"
        )
        await put_results(second, [ResultWrite(message_id="m", body=b"last", ttl_seconds=ttl)])
        waited = await asyncio.wait_for(first.wait_result("m", timeout_seconds=0), s.grace)
        assert waited == b"last", f"wait_result after four rewrites returned {show_body(waited)}"
        s.boundary(4)
