"""The optional ResultStore part: task results by message id, kept for a TTL (X60-X66).

Every bullet of the `taskrunner.queue.ResultStore` docstring has a test that reads the
same (the arguments bullet reads like the `Queue` one, so its test says "result
arguments"). The tests need ``capabilities.results`` (skipped with the reason
otherwise) and fail when it is claimed while `taskrunner.queue.results_of` returns None.

TTLs are probed at their edges with `taskrunner_conformance.edges`: a result is
returned below ``ttl - p`` and gone above ``ttl + p``, counted from its latest write.
`ResultStore.wait_result` is timed like a blocking receive: its timeout from both
sides (X64), and its wake-up by a put (X63) within ``p`` plus the probe slack of the
put when the backend claims ``result_notify``, else within its 50 ms polling interval
more.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable, Sequence

from taskrunner.errors import QueueClosedError
from taskrunner.queue import ResultStore, ResultWrite

from ..edges import Edges, Mark, Spec, Subject, Wording, check_edges, conclusively, settle_task
from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["ClosedWhileWaitingCases", "ResultCases", "get_results", "put_results"]

# Waits raced by the put of their id (X63), 0-3 event-loop turns after each starts.
_RACES = 24

# What a backend without result_notify may add to a wake-up: it polls at most this often.
POLL_SECONDS = 0.05

# Bodies of every shape a task's encoded result may take.
_SHAPES: dict[str, bytes] = {
    "an empty body": b"",
    "one NUL byte": b"\x00",
    "every byte value": bytes(range(256)),
    "bytes that are not UTF-8": b"\xff\xfe\xc3\x28 \xa0\xa1",
    "a body that looks like msgpack": b"\x82\xa1a\x01\xa1b\xc0",
    "1 MiB of random bytes": random.Random(60).randbytes(1 << 20),
}


async def put_results(part: ResultStore, writes: Sequence[ResultWrite]) -> None:
    """`part.put_results(writes)` with the writes as a list."""
    await part.put_results(list(writes))


async def get_results(part: ResultStore, message_ids: Sequence[str]) -> list[bytes | None]:
    """`part.get_results(message_ids)`, checked to answer each id with bytes or None."""
    got = await part.get_results(list(message_ids))
    assert isinstance(got, list), f"get_results returned {got!r}, not a list"
    assert len(got) == len(message_ids), (
        f"get_results of {len(message_ids)} id(s) returned {len(got)} answer(s)"
    )
    for answer in got:
        assert answer is None or type(answer) is bytes, (
            f"get_results answered {answer!r}: neither bytes nor None"
        )
    return got


def _show(body: bytes | None) -> str:
    if body is None:
        return "None"
    return repr(body) if len(body) <= 40 else f"{len(body)} bytes starting {body[:16]!r}"


async def _stored(part: ResultStore, expected: dict[str, bytes | None], when: str) -> None:
    """Every id of `expected` must have exactly its body (None: no result)."""
    ids = list(expected)
    got = await get_results(part, ids)
    wrong = [
        f"{i!r}: {_show(g)} instead of {_show(expected[i])}"
        for i, g in zip(ids, got, strict=True)
        if g != expected[i]
    ]
    assert not wrong, f"{when}, get_results answered " + "; ".join(wrong)


def _wake_bound(s: Scenario, edges: Edges) -> float:
    """Seconds after a put within which a waiting wait_result must have returned.

    ``p``, plus the polling interval without ``result_notify``; on real time plus
    twice the probe slack. On a fake clock with ``result_notify`` it is 0 for an exact
    backend: the wake-up needs no time to pass.
    """
    poll = 0.0 if s.capabilities.result_notify else POLL_SECONDS
    return poll + s.precision + (0.0 if edges.exact else 2 * edges.slack)


def _at_once_bound(s: Scenario, edges: Edges) -> float:
    """Real seconds a call that must return at once may take: ``p`` and twice the slack."""
    return s.precision + 2 * edges.slack


def _returned(task: asyncio.Task[bytes | None], message: str) -> None:
    """`task` (done) must have returned, not raised nor been cancelled."""
    assert not task.cancelled(), message
    assert task.exception() is None, message


def _outcome(task: asyncio.Task[bytes | None]) -> str:
    if task.cancelled():
        return "was cancelled"
    error = task.exception()
    if error is not None:
        return f"raised {error!r}"
    return f"returned {_show(task.result())}"


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
                f"{_show(seen)}, not its body"
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
                f"{subject.spec.label}: get_results answered {_show(body)}, not the latest "
                f"body {_show(self.bodies[subject.key])}"
            )
        return gone


class ResultCases(ConformanceBase):
    """X60-X66."""

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
        await _stored(
            reader, {ids[label]: body for label, body in _SHAPES.items()}, "after one batch"
        )
        for label, body in _SHAPES.items():
            waited = await asyncio.wait_for(
                reader.wait_result(ids[label], timeout_seconds=ttl), s.grace
            )
            assert type(waited) is bytes, f"wait_result of {label} returned {waited!r}"
            assert waited == body, f"wait_result of {label} returned {_show(waited)}"
        s.boundary(len(_SHAPES))

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
        await _stored(
            reader,
            {"expires": None, "tiny": None, "stays": b"kept"},
            f"{edges.after(ttl):g}s after writes with TTLs of {ttl:g}s and {tiny:g}s",
        )
        for message_id in ("expires", "tiny"):
            waited = await asyncio.wait_for(
                reader.wait_result(message_id, timeout_seconds=0), s.grace
            )
            assert waited is None, f"wait_result of an expired result returned {_show(waited)}"
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
        await _stored(second, {"m": b"three", "other": b"other"}, "after one batch")
        await put_results(second, [ResultWrite(message_id="m", body=big, ttl_seconds=ttl)])
        await _stored(first, {"m": big, "other": b"other"}, "after a rewrite by another handle")
        await put_results(first, [ResultWrite(message_id="m", body=b"", ttl_seconds=ttl)])
        await _stored(second, {"m": b"", "other": b"other"}, "after a rewrite with an empty body")
        await put_results(second, [ResultWrite(message_id="m", body=b"last", ttl_seconds=ttl)])
        waited = await asyncio.wait_for(first.wait_result("m", timeout_seconds=0), s.grace)
        assert waited == b"last", f"wait_result after four rewrites returned {_show(waited)}"
        s.boundary(4)

    # -- X62: independence -------------------------------------------------------------------

    @conformance("X62")
    async def test_results_of_different_message_ids_are_independent_an_unknown_id_has_no_result(
        self, s: Scenario
    ) -> None:
        """Ids that differ only by case, a prefix, a suffix or spaces, and hostile ids.

        One batch stores them all; one is rewritten and one deleted; every other keeps
        its body. Unknown ids (near misses of stored ones) answer None; get_results
        answers in the order asked, duplicates too, and ``[]`` for no ids.
        """
        writer = s.require_results()
        reader = s.require_results(await s.open())
        ttl = 100 * s.lease
        names = [
            "Result-Id",
            "result-id",
            "RESULT-ID",
            "result-i",
            "result-id-",
            "result-id-2",
            "result-id ",
            " result-id",
            "result\nid",
            "résultat-✓",
            "{tag}:result-id",
            "*",
            "0",
            "x" * 1000,
        ]
        stored: dict[str, bytes | None] = {name: f"body of {name!r}".encode() for name in names}
        await put_results(
            writer,
            [
                ResultWrite(message_id=name, body=body, ttl_seconds=ttl)
                for name, body in stored.items()
                if body is not None
            ],
        )
        await _stored(reader, stored, "after one batch of look-alike ids")
        unknown = ["result", "result-id-3", "RESULT-Id", "result-idx", "x" * 999, "00", "?"]
        await _stored(reader, dict.fromkeys(unknown), "for ids never written")
        order = ["result-id", "never", "Result-Id", "result-id", "result-i", "never", "0"]
        got = await get_results(reader, order)
        assert got == [stored.get(i) for i in order], (
            f"get_results({order!r}) answered {[_show(b) for b in got]}"
        )
        assert await reader.get_results([]) == [], "get_results([]) did not answer []"

        await put_results(
            writer, [ResultWrite(message_id="result-id", body=b"new", ttl_seconds=ttl)]
        )
        stored["result-id"] = b"new"
        await _stored(reader, stored, "after rewriting 'result-id'")
        assert await reader.delete_results(["Result-Id"]) == 1
        stored["Result-Id"] = None
        await _stored(reader, stored, "after deleting 'Result-Id'")
        s.boundary(len(names) + len(unknown))

    @conformance("X62")
    async def test_results_of_one_queue_are_not_results_of_another(self, s: Scenario) -> None:
        """One id written in two queues with different bodies; each reads its own.

        Deleting it in one leaves the other's; a wait in one is not woken by a put in the
        other.
        """
        here = s.require_results()
        there = s.require_results(await s.open(s.other_namespace()))
        ttl = 100 * s.lease
        await put_results(
            here, [ResultWrite(message_id="shared-id", body=b"here", ttl_seconds=ttl)]
        )
        (seen,) = await get_results(there, ["shared-id"])
        assert seen is None, f"a result written in one queue was read in another: {_show(seen)}"
        await put_results(
            there, [ResultWrite(message_id="shared-id", body=b"there", ttl_seconds=ttl)]
        )
        await _stored(here, {"shared-id": b"here"}, "after the other queue wrote the same id")
        await _stored(there, {"shared-id": b"there"}, "in the other queue")
        assert await there.delete_results(["shared-id"]) == 1
        await _stored(here, {"shared-id": b"here"}, "after the other queue deleted it")

        edges = Edges(s)
        task, _ = await edges.started(here.wait_result("only-there", timeout_seconds=10 * ttl))
        try:
            await put_results(
                there, [ResultWrite(message_id="only-there", body=b"wrong queue", ttl_seconds=ttl)]
            )
            await s.advance(_wake_bound(s, edges))
            await asyncio.sleep(0)
            assert not task.done(), (
                f"a wait in one queue {_outcome(task)} after a put of its id in another queue"
            )
        finally:
            await settle_task(task, s.grace)
        s.boundary(3)

    # -- X63: waking -------------------------------------------------------------------------

    @conformance("X63")
    async def test_wait_result_returns_a_result_stored_while_it_waits_well_before_its_timeout(
        self, s: Scenario
    ) -> None:
        """A wait of a hundred leases, woken by another handle's put soon after the put.

        Puts of look-alike ids (a prefix, other case, a suffix) do not end it. With
        ``result_notify`` it returns within ``p`` of the put (plus the probe slack on
        real time); without, within the 50 ms polling interval more.
        """
        waiter = s.require_results()
        writer = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        ttl = 100 * s.lease
        timeout = 100 * s.lease
        bound = _wake_bound(s, edges)
        body = random.Random(63).randbytes(1024)
        target = "awaited-Id"
        decoys = ["awaited-I", "awaited-id", "AWAITED-ID", "awaited-Id-2", " awaited-Id"]
        round_ = 0

        async def attempt() -> float | None:
            nonlocal round_
            round_ += 1
            message_id = f"{target}-{round_}"
            task, _ = await edges.started(waiter.wait_result(message_id, timeout_seconds=timeout))
            try:
                await s.advance(0.1 * s.lease)
                await asyncio.sleep(0)
                assert not task.done(), (
                    f"wait_result(timeout_seconds={timeout:g}) {_outcome(task)} "
                    f"{0.1 * s.lease:g}s in, with nothing stored"
                )
                await put_results(
                    writer,
                    [
                        ResultWrite(message_id=f"{d}-{round_}", body=d.encode(), ttl_seconds=ttl)
                        for d in decoys
                    ],
                )
                await s.advance(bound)
                await asyncio.sleep(0)
                assert not task.done(), (
                    f"wait_result({message_id!r}) {_outcome(task)} after puts of other ids"
                )
                _, put = await edges.timed(
                    put_results(
                        writer, [ResultWrite(message_id=message_id, body=body, ttl_seconds=ttl)]
                    )
                )
                if edges.exact:
                    if bound > 0:
                        await s.advance(bound)
                    await asyncio.wait({task}, timeout=s.grace)
                    in_time = task.done()
                else:
                    await asyncio.wait({task}, timeout=max(0.0, put.end + bound - s.now()))
                    in_time = task.done()
                    if not in_time:
                        await asyncio.wait({task}, timeout=s.grace)
                late = s.now() - put.end
                assert task.done(), (
                    f"wait_result(timeout_seconds={timeout:g}) was still waiting "
                    f"{late:.3f}s after its result was stored (the wake-up bound is "
                    f"{bound:.3f}s): it does not wake on a put"
                )
                _returned(task, f"wait_result {_outcome(task)} when its result was stored")
                got = task.result()
                assert got == body, f"the woken wait_result returned {_show(got)}"
                return None if in_time else late - bound
            finally:
                await settle_task(task, s.grace)

        await conclusively(edges, "a wait_result woken by a put", attempt)

    @conformance("X63")
    async def test_wait_result_of_a_stored_result_returns_at_once(self, s: Scenario) -> None:
        """A long wait of a stored result returns it without time passing; so does timeout 0.

        Two waits of one id, through two handles, are both woken by one put.
        """
        waiter = s.require_results()
        writer = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        ttl = 100 * s.lease
        bound = _at_once_bound(s, edges)
        await put_results(writer, [ResultWrite(message_id="done", body=b"ready", ttl_seconds=ttl)])

        async def attempt() -> float | None:
            for timeout in (100 * s.lease, 0.0, 1):
                task, mark = await edges.started(
                    waiter.wait_result("done", timeout_seconds=timeout)
                )
                try:
                    await asyncio.wait({task}, timeout=s.grace)
                    assert task.done(), (
                        f"wait_result(timeout_seconds={timeout:g}) of a stored result "
                        f"was still waiting {s.grace:g}s of real time later"
                    )
                    elapsed = s.now() - mark.end
                    _returned(task, f"wait_result of a stored result {_outcome(task)}")
                    assert task.result() == b"ready", (
                        f"wait_result(timeout_seconds={timeout:g}) of a stored result "
                        f"returned {_show(task.result())}"
                    )
                    if not edges.exact and elapsed > bound:
                        return elapsed - bound
                finally:
                    await settle_task(task, s.grace)
            return None

        await conclusively(edges, "wait_result of a stored result", attempt)

        other = s.require_results(await s.open())
        tasks = [
            asyncio.create_task(part.wait_result("twice", timeout_seconds=100 * s.lease))
            for part in (waiter, other)
        ]
        try:
            await asyncio.sleep(0)
            await put_results(
                writer, [ResultWrite(message_id="twice", body=b"for both", ttl_seconds=ttl)]
            )
            await s.advance(_wake_bound(s, edges))
            await asyncio.wait(set(tasks), timeout=s.grace)
            for task in tasks:
                assert task.done(), "one put woke only one of two waits of its id"
                assert task.result() == b"for both", f"a woken wait {_outcome(task)}"
        finally:
            for task in tasks:
                await settle_task(task, s.grace)

    @conformance("X63")
    async def test_put_racing_the_start_of_a_wait_result_is_never_missed(self, s: Scenario) -> None:
        """Twenty-four waits, each raced by the put of its id 0-3 event-loop turns after it starts.

        A wait that looks, finds nothing and only then subscribes misses a put landing in
        between and sleeps out its timeout of a hundred leases: every wait must return
        its body within the wake-up bound (plus grace) of the last put.
        """
        waiter = s.require_results()
        writer = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        ttl = 100 * s.lease
        tasks: list[asyncio.Task[bytes | None]] = []
        try:
            for i in range(_RACES):
                tasks.append(
                    asyncio.create_task(waiter.wait_result(f"race-{i}", timeout_seconds=ttl))
                )
                for _ in range(i % 4):
                    await asyncio.sleep(0)
                await put_results(
                    writer,
                    [ResultWrite(message_id=f"race-{i}", body=f"{i}".encode(), ttl_seconds=ttl)],
                )
            bound = _wake_bound(s, edges)
            if edges.exact and bound > 0:
                await s.advance(bound)
            await asyncio.wait(set(tasks), timeout=bound + s.grace)
            missed = [f"race-{i}" for i, task in enumerate(tasks) if not task.done()]
            assert not missed, (
                f"wait_result missed the put that raced its start: {missed} still waiting "
                f"{s.grace:g}s after their results were stored"
            )
            for i, task in enumerate(tasks):
                _returned(task, f"wait_result(race-{i}) {_outcome(task)}")
                assert task.result() == f"{i}".encode(), (
                    f"wait_result(race-{i}) returned {_show(task.result())}"
                )
        finally:
            for task in tasks:
                await settle_task(task, s.grace)
        s.boundary(4)

    @conformance("X63")
    async def test_cancelled_wait_result_ends_cancelled_and_later_waits_still_wake(
        self, s: Scenario
    ) -> None:
        """Cancelling a waiting call raises CancelledError in it (never swallowed as None).

        The id's later waits, through the same handle, are woken by a put as before.
        """
        waiter = s.require_results()
        writer = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        ttl = 100 * s.lease
        task, _ = await edges.started(waiter.wait_result("cancelled", timeout_seconds=ttl))
        await s.advance(0.1 * s.lease)
        assert not task.done(), f"wait_result with nothing stored {_outcome(task)}"
        task.cancel()
        await asyncio.wait({task}, timeout=s.grace)
        assert task.done(), f"a cancelled wait_result was still running {s.grace:g}s later"
        assert task.cancelled(), (
            f"a cancelled wait_result {_outcome(task)} instead of raising CancelledError"
        )
        again, _ = await edges.started(waiter.wait_result("cancelled", timeout_seconds=ttl))
        try:
            await put_results(
                writer, [ResultWrite(message_id="cancelled", body=b"later", ttl_seconds=ttl)]
            )
            bound = _wake_bound(s, edges)
            if edges.exact and bound > 0:
                await s.advance(bound)
            await asyncio.wait({again}, timeout=bound + s.grace)
            assert again.done(), "after a cancelled wait, a new wait of its id was not woken"
            assert again.result() == b"later", f"the new wait {_outcome(again)}"
        finally:
            await settle_task(again, s.grace)
        s.boundary(2)

    # -- X64: timeouts -------------------------------------------------------------------------

    @conformance("X64")
    async def test_wait_result_returns_none_when_no_result_is_stored_within_its_timeout_not_before(
        self, s: Scenario
    ) -> None:
        """Still waiting just before ``timeout - p``; returned None by ``timeout + p``.

        A fraction of the lease, and on a fake clock also 0.7 s; a result of another id
        stored meanwhile changes nothing.
        """
        waiter = s.require_results()
        writer = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        timeouts = [0.43 * s.lease, 0.7] if edges.exact else [0.43 * s.lease]
        rounds = 0
        for timeout in timeouts:
            before = edges.before(timeout)
            assert before is not None, "the precision leaves no room below the timeout"

            async def attempt(timeout: float = timeout, before: float = before) -> float | None:  # noqa: ASYNC109 - the wait's own timeout
                nonlocal rounds
                rounds += 1
                message_id = f"never-stored-{rounds}"
                task, mark = await edges.started(
                    waiter.wait_result(message_id, timeout_seconds=timeout)
                )
                try:
                    await put_results(
                        writer,
                        [
                            ResultWrite(
                                message_id=f"{message_id}-other",
                                body=b"not this one",
                                ttl_seconds=100 * s.lease,
                            )
                        ],
                    )
                    await edges.wait_until(mark.start + before)
                    low = s.now() - mark.end
                    returned = task.done()
                    high = s.now() - mark.start
                    if not edges.certainly_before(timeout, high):
                        return edges.before_miss(timeout, low, high)
                    assert not returned, (
                        f"wait_result(timeout_seconds={timeout:g}) {_outcome(task)} within "
                        f"{high:.4f}s, before its timeout minus the precision {s.precision:g}s"
                    )
                    await edges.wait_until(mark.end + edges.after(timeout))
                    assert await edges.finished(task), (
                        f"wait_result(timeout_seconds={timeout:g}) was still waiting "
                        f"{edges.after(timeout):.4f}s plus {s.grace:g}s of grace later"
                    )
                    _returned(task, f"wait_result at its timeout {_outcome(task)}")
                    assert task.result() is None, (
                        f"wait_result with nothing stored returned {_show(task.result())}"
                    )
                    return edges.before_miss(timeout, low, high)
                finally:
                    await settle_task(task, s.grace)

            await conclusively(edges, f"wait_result(timeout_seconds={timeout:g})", attempt)

    @conformance("X64")
    async def test_wait_result_with_timeout_0_and_nothing_stored_returns_none_at_once(
        self, s: Scenario
    ) -> None:
        """No time needs to pass: on a fake clock the clock stays put while it returns."""
        part = s.require_results()
        edges = Edges(s)
        await edges.head_start()
        bound = _at_once_bound(s, edges)

        async def attempt() -> float | None:
            task, mark = await edges.started(part.wait_result("nothing", timeout_seconds=0))
            try:
                await asyncio.wait({task}, timeout=s.grace)
                assert task.done(), (
                    f"wait_result(timeout_seconds=0) was still waiting {s.grace:g}s later"
                )
                elapsed = s.now() - mark.end
                _returned(task, f"wait_result(timeout_seconds=0) {_outcome(task)}")
                assert task.result() is None, f"it returned {_show(task.result())}"
                return None if edges.exact or elapsed <= bound else elapsed - bound
            finally:
                await settle_task(task, s.grace)

        await conclusively(edges, "wait_result(timeout_seconds=0)", attempt)

    # -- X65: deletion -------------------------------------------------------------------------

    @conformance("X65")
    async def test_deleted_results_and_those_of_a_deleted_queue_are_gone(self, s: Scenario) -> None:
        """delete_results counts what existed (not expired, unknown ids); delete_queue forgets all.

        Through another handle. A deleted id may be written again. After delete_queue
        the reused queue has no result, and another queue keeps its own.
        """
        writer = s.require_results()
        deleter = s.require_results(await s.open())
        edges = Edges(s)
        await edges.head_start()
        ttl = 100 * s.lease
        short = 0.25 * s.lease
        await put_results(
            writer,
            [
                ResultWrite(message_id=name, body=name.encode(), ttl_seconds=ttl)
                for name in ("a", "b", "c", "a-prefix")
            ]
            + [ResultWrite(message_id="expired", body=b"expired", ttl_seconds=short)],
        )
        await s.advance(edges.after(short))
        (expired,) = await get_results(writer, ["expired"])
        assert expired is None, "a result outlived its TTL"
        count = await deleter.delete_results(["a", "c", "never-written", "expired", "A"])
        assert count == 2, (
            f"delete_results of two stored, one expired and two unknown ids returned {count!r}"
        )
        await _stored(
            writer,
            {"a": None, "b": b"b", "c": None, "a-prefix": b"a-prefix", "expired": None},
            "after delete_results(['a', 'c', ...])",
        )
        assert await deleter.delete_results(["a", "c"]) == 0, "a second delete counted again"
        assert await deleter.delete_results([]) == 0, "delete_results([]) did not return 0"
        await put_results(writer, [ResultWrite(message_id="a", body=b"again", ttl_seconds=ttl)])
        await _stored(deleter, {"a": b"again"}, "after writing a deleted id again")
        s.boundary(4)

        admin = s.require_admin()
        elsewhere = s.require_results(await s.open(s.other_namespace()))
        await put_results(elsewhere, [ResultWrite(message_id="b", body=b"kept", ttl_seconds=ttl)])
        await admin.delete_queue()
        reused = s.require_results(await s.open())
        await _stored(
            reused,
            {"a": None, "b": None, "a-prefix": None},
            "in a queue reused after delete_queue",
        )
        waited = await asyncio.wait_for(reused.wait_result("b", timeout_seconds=0), s.grace)
        assert waited is None, f"wait_result after delete_queue returned {_show(waited)}"
        await _stored(elsewhere, {"b": b"kept"}, "in another queue after delete_queue")
        await put_results(reused, [ResultWrite(message_id="b", body=b"new", ttl_seconds=ttl)])
        await _stored(reused, {"b": b"new"}, "after a write in the reused queue")
        s.boundary(2)

    # -- X66: arguments ------------------------------------------------------------------------

    @conformance("X66")
    async def test_invalid_result_arguments_raise_value_error_or_type_error_before_anything_changes(
        self, s: Scenario
    ) -> None:
        """Each bad write in a batch with good ones, first and last: refused, nothing stored.

        Not a ResultWrite, a body that is not bytes (str, None, bytearray): TypeError; a
        TTL of 0, -1, NaN, inf or -inf, an empty message id: ValueError. A good write
        in the batch must not replace a stored result nor store a new one. A TTL that is
        not a number raises either.
        """
        part = s.require_results()
        reader = s.require_results(await s.open())
        ttl = 100 * s.lease
        await put_results(part, [ResultWrite(message_id="kept", body=b"old", ttl_seconds=ttl)])
        good = [
            ResultWrite(message_id="kept", body=b"replaced", ttl_seconds=ttl),
            ResultWrite(message_id="fresh", body=b"stored", ttl_seconds=ttl),
        ]

        def write(**change: object) -> ResultWrite:
            fields: dict[str, object] = {"message_id": "bad", "body": b"x", "ttl_seconds": ttl}
            fields.update(change)
            return ResultWrite(**fields)  # type: ignore[arg-type]

        type_errors: dict[str, object] = {
            "a bytes object instead of a ResultWrite": b"body",
            "a tuple instead of a ResultWrite": ("bad", b"x", ttl),
            "None instead of a ResultWrite": None,
            "a str body": write(body="text"),
            "a None body": write(body=None),
            "a bytearray body": write(body=bytearray(b"x")),
        }
        value_errors: dict[str, object] = {
            "ttl_seconds=0": write(ttl_seconds=0.0),
            "ttl_seconds=-1": write(ttl_seconds=-1.0),
            "ttl_seconds=nan": write(ttl_seconds=math.nan),
            "ttl_seconds=inf": write(ttl_seconds=math.inf),
            "ttl_seconds=-inf": write(ttl_seconds=-math.inf),
            "message_id=''": write(message_id=""),
        }
        either: dict[str, object] = {
            "ttl_seconds='10'": write(ttl_seconds="10"),
            "ttl_seconds=None": write(ttl_seconds=None),
        }
        expected = {"kept": b"old", "fresh": None, "bad": None}
        wrong = []
        cases = [*type_errors.items(), *value_errors.items(), *either.items()]
        for label, bad in cases:
            errors: tuple[type[Exception], ...] = (
                (TypeError,)
                if label in type_errors
                else (ValueError,)
                if label in value_errors
                else (TypeError, ValueError)
            )
            for where, batch in (("last", [*good, bad]), ("first", [bad, *good])):
                try:
                    await part.put_results(batch)  # type: ignore[arg-type]
                except errors:
                    pass
                except Exception as exc:
                    wrong.append(f"{label} ({where} in its batch) raised {exc!r}")
                else:
                    wrong.append(f"{label} ({where} in its batch) was accepted")
                got = await reader.get_results(list(expected))
                if got != list(expected.values()):
                    wrong.append(f"{label} ({where} in its batch) stored {got!r}")
                    await put_results(
                        part, [ResultWrite(message_id="kept", body=b"old", ttl_seconds=ttl)]
                    )
                    await part.delete_results(["fresh", "bad"])
        assert not wrong, "; ".join(wrong)
        s.boundary(len(cases))

        waits = {
            "timeout_seconds=-1": ("kept", -1.0),
            "timeout_seconds=nan": ("kept", math.nan),
            "timeout_seconds=inf": ("kept", math.inf),
            "timeout_seconds=-inf": ("kept", -math.inf),
            "message_id=''": ("", 1.0),
        }
        for label, (message_id, timeout) in waits.items():
            try:
                result = await asyncio.wait_for(
                    part.wait_result(message_id, timeout_seconds=timeout), s.grace
                )
            except ValueError:
                continue
            except TimeoutError:
                wrong.append(f"wait_result({label}) waited instead of raising ValueError")
            except Exception as exc:
                wrong.append(f"wait_result({label}) raised {exc!r}, not ValueError")
            else:
                wrong.append(f"wait_result({label}) returned {_show(result)}")
        assert not wrong, "; ".join(wrong)
        s.boundary(len(waits))

        await put_results(part, [])
        await _stored(reader, {"kept": b"old"}, "after put_results([])")

        # get_results and delete_results: an id that could never be stored is unknown,
        # a non-str id or a lone string instead of a sequence is a TypeError.
        (empty,) = await get_results(reader, [""])
        assert empty is None, f"get_results(['']) answered {_show(empty)}"
        assert await part.delete_results([""]) == 0, "delete_results(['']) counted something"
        refused: dict[str, Callable[[], Awaitable[object]]] = {
            "get_results('kept')": lambda: part.get_results("kept"),
            "get_results([5])": lambda: part.get_results([5]),  # type: ignore[list-item]
            "get_results([b'kept'])": lambda: part.get_results([b"kept"]),  # type: ignore[list-item]
            "delete_results('kept')": lambda: part.delete_results("kept"),
            "delete_results([5])": lambda: part.delete_results([5]),  # type: ignore[list-item]
            "delete_results([b'kept'])": lambda: part.delete_results(
                [b"kept"]  # type: ignore[list-item]
            ),
        }
        for label, call in refused.items():
            try:
                answer = await call()
            except TypeError:
                continue
            except Exception as exc:
                wrong.append(f"{label} raised {exc!r}, not TypeError")
            else:
                wrong.append(f"{label} returned {answer!r}")
        assert not wrong, "; ".join(wrong)
        await _stored(reader, {"kept": b"old"}, "after refused get and delete calls")
        s.boundary(len(refused) + 2)

    @conformance("X66")
    async def test_valid_edge_result_arguments_are_accepted(self, s: Scenario) -> None:
        """A whole-number TTL, a tiny one, a huge one; timeout 0 and a whole-number timeout."""
        part = s.require_results()
        accepted = {
            "ttl_seconds=1 (an int)": ResultWrite(message_id="int", body=b"i", ttl_seconds=1),
            "ttl_seconds=1e-3": ResultWrite(message_id="tiny", body=b"t", ttl_seconds=1e-3),
            "ttl_seconds=1e9": ResultWrite(message_id="huge", body=b"h", ttl_seconds=1e9),
        }
        wrong = []
        for label, good in accepted.items():
            try:
                await put_results(part, [good])
            except (TypeError, ValueError) as exc:
                wrong.append(f"{label} was refused: {exc!r}")
        assert not wrong, "; ".join(wrong)
        (huge,) = await get_results(part, ["huge"])
        assert huge == b"h", f"a result with a TTL of 1e9 s answered {_show(huge)}"
        got = await asyncio.wait_for(part.wait_result("huge", timeout_seconds=1), s.grace)
        assert got == b"h", f"wait_result(timeout_seconds=1) returned {_show(got)}"
        s.boundary(len(accepted) + 1)


class ClosedWhileWaitingCases(ConformanceBase):
    """X1 for a wait in progress (part of `ResultCases`)."""

    @conformance("X1")
    async def test_wait_result_raises_queue_closed_error_when_its_handle_is_closed_while_it_waits(
        self, s: Scenario
    ) -> None:
        """Closed by another task mid-wait: QueueClosedError soon, not None at the timeout.

        Another handle's wait of the same id is not ended and is woken by a put.
        """
        closing = await s.open()
        waiter = s.require_results(closing)
        other = s.require_results()
        edges = Edges(s)
        await edges.head_start()
        ttl = 100 * s.lease
        task, _ = await edges.started(waiter.wait_result("closing", timeout_seconds=ttl))
        survivor, _ = await edges.started(other.wait_result("closing", timeout_seconds=ttl))
        try:
            await s.advance(0.1 * s.lease)
            assert not task.done(), f"wait_result with nothing stored {_outcome(task)}"
            await closing.aclose()
            await asyncio.wait({task}, timeout=s.grace)
            assert task.done(), (
                f"a wait_result whose handle was closed was still waiting {s.grace:g}s later"
            )
            assert not task.cancelled(), "a wait_result whose handle was closed was cancelled"
            error = task.exception()
            assert isinstance(error, QueueClosedError), (
                f"a wait_result whose handle was closed {_outcome(task)}, not QueueClosedError"
            )
            assert not survivor.done(), (
                f"closing one handle ended another handle's wait: it {_outcome(survivor)}"
            )
            await put_results(
                other, [ResultWrite(message_id="closing", body=b"after", ttl_seconds=ttl)]
            )
            bound = _wake_bound(s, edges)
            if edges.exact and bound > 0:
                await s.advance(bound)
            await asyncio.wait({survivor}, timeout=bound + s.grace)
            assert survivor.done(), "the other handle's wait was not woken by a put"
            assert survivor.result() == b"after", f"the other wait {_outcome(survivor)}"
        finally:
            await settle_task(task, s.grace)
            await settle_task(survivor, s.grace)
        s.boundary(2)


def closed_result_calls(part: ResultStore) -> dict[str, Callable[[], Awaitable[object]]]:
    """Every ResultStore method, empty batches too, as calls for a closed-handle check."""
    write = ResultWrite(message_id="closed", body=b"x", ttl_seconds=60.0)
    return {
        "results.put_results([])": lambda: part.put_results([]),
        "results.put_results([write])": lambda: part.put_results([write]),
        "results.get_results([])": lambda: part.get_results([]),
        "results.get_results([id])": lambda: part.get_results(["closed"]),
        "results.wait_result(timeout 0)": lambda: part.wait_result("closed", timeout_seconds=0),
        "results.wait_result(timeout 1)": lambda: part.wait_result("closed", timeout_seconds=1),
        "results.delete_results([])": lambda: part.delete_results([]),
        "results.delete_results([id])": lambda: part.delete_results(["closed"]),
    }


async def refused_when_closed(
    calls: dict[str, Callable[[], Awaitable[object]]], grace: float
) -> None:
    """Run every call; fail naming each one that did not raise QueueClosedError at once."""
    wrong = []
    for name, call in calls.items():
        try:
            result = await asyncio.wait_for(call(), grace)
        except QueueClosedError:
            continue
        except TimeoutError:
            wrong.append(f"{name} waited")
        except Exception as exc:
            wrong.append(f"{name} raised {exc!r}")
        else:
            wrong.append(f"{name} returned {result!r}")
    assert not wrong, "on a closed handle, " + "; ".join(wrong)
