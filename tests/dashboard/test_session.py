"""Dashboard sessions: they expire (checked by the server) and sign-out ends them."""

from __future__ import annotations

import pytest

from taskrunner.app import App
from taskrunner.dashboard import Dashboard, Guard, QueueSet
from taskrunner.producer import Producer
from taskrunner.queue import Queue
from taskrunner.testing import FakeClock
from taskrunner_backends.memory import open_from_url
from tests.dashboard.support import TOKEN, client, memory_url

HOUR = 3600.0


async def _board(clock: FakeClock, guard: Guard) -> tuple[Queue, Dashboard]:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    app = App("jobs")

    @app.task(name="t.echo")
    def echo(value: object) -> None: ...

    for n in range(3):
        await Producer(queue, app).dispatch_many("t.echo", [n])
    deliveries = await queue.receive("c1", max_messages=3, wait_seconds=0, lease_seconds=30)
    await queue.dead_letter(deliveries, reason="bad")

    async def opener(name: str) -> Queue:
        return await open_from_url(url, queue_name=name)

    board = Dashboard(queues=QueueSet(["jobs"], opener), url="memory://", guard=guard, clock=clock)
    return queue, board


def _purge_one(guard: Guard) -> dict[str, str]:
    return {"action": "purge", "id": "all", "csrf": guard.csrf}


async def test_a_session_works_until_its_time_and_is_refused_after() -> None:
    clock = FakeClock()
    guard = Guard(TOKEN, session_seconds=2 * HOUR)
    queue, board = await _board(clock, guard)
    async with client(board) as http:
        signed = await http.post("/login", data={"token": TOKEN})
        await clock.advance(2 * HOUR - 1)
        before = await http.get("/queues/jobs/dead/confirm?action=purge&id=all")
        await clock.advance(2)
        # The cookie is still sent (the test client ignores Max-Age): the server refuses.
        after = await http.get("/queues/jobs/dead/confirm?action=purge&id=all")
        acted = await http.post("/queues/jobs/dead/action", data=_purge_one(guard))
        page = await http.get("/queues/jobs/dead")
    await board.queues.aclose()

    assert signed.status_code == 303
    assert "Max-Age=7200" in signed.headers["set-cookie"]
    assert before.status_code == 200
    # An expired session reads nothing either: back to the sign-in page.
    assert after.status_code == 303
    assert after.headers["location"].startswith("/login?next=")
    assert acted.status_code == 403
    assert page.status_code == 303
    assert (await queue.stats()).dead == 3


async def test_the_default_session_lasts_eight_hours() -> None:
    clock = FakeClock()
    _, board = await _board(clock, Guard(TOKEN))
    async with client(board) as http:
        await http.post("/login", data={"token": TOKEN})
        await clock.advance(8 * HOUR - 1)
        before = await http.get("/queues/jobs/dead/confirm?action=purge&id=all")
        await clock.advance(1)
        after = await http.get("/queues/jobs/dead/confirm?action=purge&id=all")
    await board.queues.aclose()

    assert before.status_code == 200
    assert after.status_code == 303


async def test_sign_out_ends_the_session_and_the_old_cookie_is_refused() -> None:
    clock = FakeClock()
    guard = Guard(TOKEN)
    queue, board = await _board(clock, guard)
    async with client(board) as http:
        await http.post("/login", data={"token": TOKEN})
        cookie = http.cookies["taskrunner_dashboard"]
        page = await http.get("/")
        forged = await http.post("/logout", data={"csrf": "0" * 64})
        still = await http.get("/queues/jobs/dead/confirm?action=purge&id=all")
        out = await http.post("/logout", data={"csrf": guard.csrf})
        # A copy of the old cookie, sent again after sign-out.
        replayed = await http.post(
            "/queues/jobs/dead/action",
            data=_purge_one(guard),
            headers={"cookie": f"taskrunner_dashboard={cookie}"},
        )
    await board.queues.aclose()

    assert 'action="/logout"' in page.text
    assert f'name="csrf" value="{guard.csrf}"' in page.text
    assert forged.status_code == 403
    assert still.status_code == 200
    assert out.status_code == 303
    assert out.headers["location"] == "/"
    assert 'taskrunner_dashboard=""' in out.headers["set-cookie"]
    assert replayed.status_code == 403
    assert (await queue.stats()).dead == 3


def test_a_session_time_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        Guard(TOKEN, session_seconds=0)
