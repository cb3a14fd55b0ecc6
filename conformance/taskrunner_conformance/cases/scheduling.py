"""The optional Scheduling part: delayed adds, unique adds, cancellation (X40-X48).

Every bullet of the `taskrunner.queue.Scheduling` docstring has a test that reads the
same. Each test needs the capability flag of what it checks (``delayed_add``,
``unique_add``, ``cancel``) and the part itself (`taskrunner.queue.scheduling_of`); a
flag not claimed skips the test with the reason, and a flag claimed without the part
fails it.

The cases live in one module per option: `delayed_adds` (X40, X41), `unique_keys`
(X42-X45) and `cancel` (X46, X47); this one assembles them into `SchedulingCases` and
holds the argument checks all three share (X48). Due times and ``unique_seconds``
are probed at their edges with `taskrunner_conformance.edges`, exactly as release
delays are (X15).
"""

from __future__ import annotations

import math

import pytest

from taskrunner.queue import AddRequest

from ..scenario import Scenario, conformance
from .cancel import CancelCases
from .delayed_adds import DelayedAddCases
from .fencing import queue_state
from .scheduling_calls import add_requests
from .unique_keys import UniqueKeyCases

__all__ = ["SchedulingCases", "add_requests"]


class SchedulingCases(DelayedAddCases, UniqueKeyCases, CancelCases):
    """X40-X48: the delayed, unique and cancel cases, and the arguments of all three."""

    @conformance("X48")
    async def test_invalid_add_requests_raise_and_add_nothing(self, s: Scenario) -> None:
        """Each bad request last in a batch after a good one: refused, nothing added.

        Not an AddRequest, a body that is not bytes (TypeError); a negative, NaN or
        infinite delay, a NaN or infinite due_at, an empty unique key, a negative or NaN
        unique_seconds (ValueError, whether or not the option is claimed).
        """
        part = s.require_scheduling()
        good = AddRequest(body=b"good")
        nan, inf = math.nan, math.inf
        type_errors: dict[str, object] = {
            "a bytes object instead of an AddRequest": b"body",
            "a str body": AddRequest(body="text"),  # type: ignore[arg-type]
            "a None body": AddRequest(body=None),  # type: ignore[arg-type]
        }
        value_errors: dict[str, AddRequest] = {
            "delay_seconds=-1": AddRequest(body=b"x", delay_seconds=-1.0),
            "delay_seconds=nan": AddRequest(body=b"x", delay_seconds=nan),
            "delay_seconds=inf": AddRequest(body=b"x", delay_seconds=inf),
            "due_at=nan": AddRequest(body=b"x", due_at=nan),
            "due_at=inf": AddRequest(body=b"x", due_at=inf),
            "unique_key=''": AddRequest(body=b"x", unique_key=""),
            "unique_seconds=-1": AddRequest(body=b"x", unique_key="k", unique_seconds=-1.0),
            "unique_seconds=nan": AddRequest(body=b"x", unique_key="k", unique_seconds=nan),
        }
        before = await queue_state(s.queue)
        wrong = []
        for label, bad in [*type_errors.items(), *value_errors.items()]:
            expected = TypeError if label in type_errors else ValueError
            try:
                result = await part.add_requests([good, bad])  # type: ignore[list-item]
            except expected:
                pass
            except Exception as exc:
                wrong.append(f"{label} raised {exc!r}, not {expected.__name__}")
            else:
                wrong.append(f"{label} returned {result!r}")
            if await queue_state(s.queue) != before:
                wrong.append(f"{label} changed the queue")
                before = await queue_state(s.queue)
        assert not wrong, "; ".join(wrong)
        s.boundary(len(type_errors) + len(value_errors))
        assert await part.add_requests([]) == [], "add_requests([])"
        (plain,) = await add_requests(part, [AddRequest(body=b"", delay_seconds=0)])
        assert plain.added, "a plain request with delay 0 added nothing"
        (got,) = await s.receive_n(s.queue, s.consumer("a"), 1)
        assert (got.message_id, got.body, got.delivery_count) == (plain.message_id, b"", 1)
        assert await s.queue.ack([got]) == []

    @conformance("X48")
    async def test_valid_edge_requests_are_accepted(self, s: Scenario) -> None:
        """Zero is a valid duration outside leases; a due_at before 1970 is only in the past.

        delay_seconds=0, due_at of 0 and of -5 (with delayed_add), unique_seconds=0
        (with unique_add): each adds a message that is ready at once.
        """
        part = s.require_scheduling()
        caps = s.queue.capabilities
        requests = {"delay_seconds=0": AddRequest(body=b"delay 0", delay_seconds=0)}
        if caps.delayed_add:
            requests["due_at=0"] = AddRequest(body=b"due 0", due_at=0.0)
            requests["due_at=-5"] = AddRequest(body=b"due -5", due_at=-5.0)
        if caps.unique_add:
            requests["unique_seconds=0"] = AddRequest(
                body=b"unique 0", unique_key="zero", unique_seconds=0.0
            )
        wrong = []
        ids: dict[str, bytes] = {}
        for label, request in requests.items():
            try:
                (added,) = await add_requests(part, [request])
            except (TypeError, ValueError) as exc:
                wrong.append(f"{label} was refused: {exc!r}")
                continue
            if not added.added:
                wrong.append(f"{label} added nothing: {added!r}")
            ids[added.message_id] = request.body
        assert not wrong, "; ".join(wrong)
        s.boundary(len(requests))
        got = await s.receive_n(s.queue, s.consumer("a"), len(ids))
        assert {d.message_id: d.body for d in got} == ids, "an accepted request was not ready"
        assert await s.queue.ack(got) == []

    @conformance("X48")
    async def test_options_the_backend_does_not_claim_raise_value_error_and_add_nothing(
        self, s: Scenario
    ) -> None:
        """delay_seconds > 0 or due_at without delayed_add, unique_key without unique_add.

        Read from the queue's own claims (a harness override narrows what the suite
        tests, not what the backend refuses).
        """
        part = s.require_scheduling()
        caps = s.queue.capabilities
        unclaimed: dict[str, AddRequest] = {}
        if not caps.delayed_add:
            unclaimed["delay_seconds=1"] = AddRequest(body=b"x", delay_seconds=1.0)
            unclaimed["due_at"] = AddRequest(body=b"x", due_at=s.wall() + 1)
        if not caps.unique_add:
            unclaimed["unique_key='k'"] = AddRequest(body=b"x", unique_key="k")
        if not unclaimed:
            pytest.skip("the backend claims delayed_add and unique_add: no option is unclaimed")
        before = await queue_state(s.queue)
        for label, request in unclaimed.items():
            try:
                result = await part.add_requests([AddRequest(body=b"good"), request])
            except ValueError:
                pass
            else:
                raise AssertionError(f"{label}, not claimed, was accepted: {result!r}")
            assert await queue_state(s.queue) == before, f"the refused {label} added something"
        s.boundary(len(unclaimed))
