"""Calls to the ResultStore part, checked, and the bounds of its timings (X60-X66).

Shared by the result case modules, and by the lookup and browse cases for their
closed-handle checks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from taskrunner.errors import QueueClosedError
from taskrunner.queue import ResultStore, ResultWrite

from ..edges import Edges
from ..scenario import Scenario

__all__ = [
    "POLL_SECONDS",
    "at_once_bound",
    "check_returned",
    "check_stored",
    "closed_result_calls",
    "get_results",
    "outcome_of",
    "put_results",
    "refused_when_closed",
    "show_body",
    "wake_bound",
]

# What a backend without result_notify may add to a wake-up: it polls at most this often.
POLL_SECONDS = 0.05


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


def show_body(body: bytes | None) -> str:
    """`body` for a failure message: whole when short, else its length and start."""
    if body is None:
        return "None"
    return repr(body) if len(body) <= 40 else f"{len(body)} bytes starting {body[:16]!r}"


async def check_stored(part: ResultStore, expected: dict[str, bytes | None], when: str) -> None:
    """Every id of `expected` must have exactly its body (None: no result)."""
    ids = list(expected)
    got = await get_results(part, ids)
    wrong = [
        f"{i!r}: {show_body(g)} instead of {show_body(expected[i])}"
        for i, g in zip(ids, got, strict=True)
        if g != expected[i]
    ]
    assert not wrong, f"{when}, get_results answered " + "; ".join(wrong)


def wake_bound(s: Scenario, edges: Edges) -> float:
    """Seconds after a put within which a waiting wait_result must have returned.

    ``p``, plus the polling interval without ``result_notify``; on real time plus
    twice the probe slack. On a fake clock with ``result_notify`` it is 0 for an exact
    backend: the wake-up needs no time to pass.
    """
    poll = 0.0 if s.capabilities.result_notify else POLL_SECONDS
    return poll + s.precision + (0.0 if edges.exact else 2 * edges.slack)


def at_once_bound(s: Scenario, edges: Edges) -> float:
    """Real seconds a call that must return at once may take: ``p`` and twice the slack."""
    return s.precision + 2 * edges.slack


def check_returned(task: asyncio.Task[bytes | None], message: str) -> None:
    """`task` (done) must have returned, not raised nor been cancelled."""
    assert not task.cancelled(), message
    assert task.exception() is None, message


def outcome_of(task: asyncio.Task[bytes | None]) -> str:
    """What the finished `task` did, for a failure message ("returned None")."""
    if task.cancelled():
        return "was cancelled"
    error = task.exception()
    if error is not None:
        return f"raised {error!r}"
    return f"returned {show_body(task.result())}"


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
