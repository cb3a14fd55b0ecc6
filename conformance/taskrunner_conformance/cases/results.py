"""The optional ResultStore part: task results by message id, kept for a TTL (X60-X66).

Every bullet of the `taskrunner.queue.ResultStore` docstring has a test that reads the
same (the arguments bullet reads like the `Queue` one, so its test says "result
arguments"). The tests need ``capabilities.results`` (skipped with the reason
otherwise) and fail when it is claimed while `taskrunner.queue.results_of` returns None.


The cases live in three modules: `result_ttls` (TTLs and rewrites at their edges,
X60, X61), `result_waits` (`wait_result`, X63, X64) and this one (independent ids,
deletion and arguments, X62, X65, X66), which assembles `ResultCases`;
`result_calls` holds the checked calls they share.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

from taskrunner.queue import ResultWrite

from ..edges import Edges, settle_task
from ..scenario import Scenario, conformance
from .result_calls import (
    check_stored,
    closed_result_calls,
    get_results,
    outcome_of,
    put_results,
    refused_when_closed,
    show_body,
    wake_bound,
)
from .result_ttls import ResultTtlCases
from .result_waits import ClosedWhileWaitingCases, ResultWaitCases

__all__ = [
    "ClosedWhileWaitingCases",
    "ResultCases",
    "closed_result_calls",
    "get_results",
    "put_results",
    "refused_when_closed",
]


class ResultCases(ResultTtlCases, ResultWaitCases):
    """X60-X66."""

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
        await check_stored(reader, stored, "after one batch of look-alike ids")
        unknown = ["result", "result-id-3", "RESULT-Id", "result-idx", "x" * 999, "00", "?"]
        await check_stored(reader, dict.fromkeys(unknown), "for ids never written")
        order = ["result-id", "never", "Result-Id", "result-id", "result-i", "never", "0"]
        got = await get_results(reader, order)
        assert got == [stored.get(i) for i in order], (
            f"get_results({order!r}) answered {[show_body(b) for b in got]}"
        )
        assert await reader.get_results([]) == [], "get_results([]) did not answer []"

        await put_results(
            writer, [ResultWrite(message_id="result-id", body=b"new", ttl_seconds=ttl)]
        )
        stored["result-id"] = b"new"
        await check_stored(reader, stored, "after rewriting 'result-id'")
        assert await reader.delete_results(["Result-Id"]) == 1
        stored["Result-Id"] = None
        await check_stored(reader, stored, "after deleting 'Result-Id'")
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
        assert seen is None, f"a result written in one queue was read in another: {show_body(seen)}"
        await put_results(
            there, [ResultWrite(message_id="shared-id", body=b"there", ttl_seconds=ttl)]
        )
        await check_stored(here, {"shared-id": b"here"}, "after the other queue wrote the same id")
        await check_stored(there, {"shared-id": b"there"}, "in the other queue")
        assert await there.delete_results(["shared-id"]) == 1
        await check_stored(here, {"shared-id": b"here"}, "after the other queue deleted it")

        edges = Edges(s)
        task, _ = await edges.started(here.wait_result("only-there", timeout_seconds=10 * ttl))
        try:
            await put_results(
                there, [ResultWrite(message_id="only-there", body=b"wrong queue", ttl_seconds=ttl)]
            )
            await s.advance(wake_bound(s, edges))
            await asyncio.sleep(0)
            assert not task.done(), (
                f"a wait in one queue {outcome_of(task)} after a put of its id in another queue"
            )
        finally:
            await settle_task(task, s.grace)
        s.boundary(3)

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
        await check_stored(
            writer,
            {"a": None, "b": b"b", "c": None, "a-prefix": b"a-prefix", "expired": None},
            "after delete_results(['a', 'c', ...])",
        )
        assert await deleter.delete_results(["a", "c"]) == 0, "a second delete counted again"
        assert await deleter.delete_results([]) == 0, "delete_results([]) did not return 0"
        await put_results(writer, [ResultWrite(message_id="a", body=b"again", ttl_seconds=ttl)])
        await check_stored(deleter, {"a": b"again"}, "after writing a deleted id again")
        s.boundary(4)

        admin = s.require_admin()
        elsewhere = s.require_results(await s.open(s.other_namespace()))
        await put_results(elsewhere, [ResultWrite(message_id="b", body=b"kept", ttl_seconds=ttl)])
        await admin.delete_queue()
        reused = s.require_results(await s.open())
        await check_stored(
            reused,
            {"a": None, "b": None, "a-prefix": None},
            "in a queue reused after delete_queue",
        )
        waited = await asyncio.wait_for(reused.wait_result("b", timeout_seconds=0), s.grace)
        assert waited is None, f"wait_result after delete_queue returned {show_body(waited)}"
        await check_stored(elsewhere, {"b": b"kept"}, "in another queue after delete_queue")
        await put_results(reused, [ResultWrite(message_id="b", body=b"new", ttl_seconds=ttl)])
        await check_stored(reused, {"b": b"new"}, "after a write in the reused queue")
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
                wrong.append(f"wait_result({label}) returned {show_body(result)}")
        assert not wrong, "; ".join(wrong)
        s.boundary(len(waits))

        await put_results(part, [])
        await check_stored(reader, {"kept": b"old"}, "after put_results([])")

        # get_results and delete_results: an id that could never be stored is unknown,
        # a non-str id or a lone string instead of a sequence is a TypeError.
        (empty,) = await get_results(reader, [""])
        assert empty is None, f"get_results(['']) answered {show_body(empty)}"
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
        await check_stored(reader, {"kept": b"old"}, "after refused get and delete calls")
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
        assert huge == b"h", f"a result with a TTL of 1e9 s answered {show_body(huge)}"
        got = await asyncio.wait_for(part.wait_result("huge", timeout_seconds=1), s.grace)
        assert got == b"h", f"wait_result(timeout_seconds=1) returned {show_body(got)}"
        s.boundary(len(accepted) + 1)
