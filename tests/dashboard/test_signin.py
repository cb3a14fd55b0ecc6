"""With a token, the dashboard serves nothing without a sign-in; without one it is open."""

from __future__ import annotations

import re

import httpx
import pytest
from starlette.routing import Mount, Route

from taskrunner.app import App
from taskrunner.dashboard import Dashboard, Guard, QueueSet, create_app
from taskrunner.dashboard.signin import PUBLIC_PATHS, safe_next
from taskrunner.producer import Producer
from taskrunner.queue import Queue
from taskrunner_backends.memory import open_from_url
from tests.dashboard.support import TOKEN, client, memory_url

_PARAMS = {"name": "jobs", "dead_id": "no-such-letter", "message_id": "no-such-message"}
SECRET_PAYLOAD = "payload-only-a-signed-in-reader-sees"


async def _board(*, guard: Guard | None, actions: bool = True) -> tuple[Queue, Dashboard]:
    url = memory_url()
    queue = await open_from_url(url, queue_name="jobs")
    app = App("jobs")

    @app.task(name="t.echo")
    def echo(value: object) -> None: ...

    await Producer(queue, app).dispatch_many("t.echo", ["dead one", SECRET_PAYLOAD])
    [held] = await queue.receive("c1", max_messages=1, wait_seconds=0, lease_seconds=30)
    await queue.dead_letter([held], reason="bad")

    async def opener(name: str) -> Queue:
        return await open_from_url(url, queue_name=name)

    board = Dashboard(
        queues=QueueSet(["jobs"], opener), url="memory://", guard=guard, actions=actions
    )
    return queue, board


def _paths() -> list[tuple[str, str]]:
    """(method, path) of every route of the app, parameters filled in."""
    found = []
    for route in create_app(Dashboard(queues=QueueSet([], _never), url="memory://")).routes:
        if isinstance(route, Mount):
            found += [("GET", "/static/dashboard.js"), ("GET", "/static/live.js")]
            continue
        assert isinstance(route, Route)
        path = re.sub(r"{(\w+)(:\w+)?}", lambda m: _PARAMS[m.group(1)], route.path)
        found += [(method, path) for method in sorted(route.methods or {"GET"})]
    return found


async def _never(name: str) -> Queue:
    raise AssertionError("no queue is opened to list the routes")


async def test_without_a_session_every_route_but_the_sign_in_is_refused() -> None:
    queue, board = await _board(guard=Guard(TOKEN), actions=False)
    refused = []
    async with client(board) as http:
        for method, path in [*_paths(), ("GET", "/no/such/page"), ("GET", "/?page=2")]:
            if path in PUBLIC_PATHS:
                continue
            response = await http.request(method, path)
            refused.append((method, path, response.status_code))
            assert SECRET_PAYLOAD not in response.text
            assert "memory://" not in response.text
            if path.startswith("/api/"):
                assert response.status_code == 401, path
                assert response.headers["www-authenticate"].startswith("Bearer")
            elif method in ("GET", "HEAD"):
                assert response.status_code == 303, path
                assert response.headers["location"].startswith("/login")
            else:
                assert response.status_code == 403, path
        login = await http.get("/login")
        css = await http.get("/static/dashboard.css")
    await board.queues.aclose()

    assert len(refused) > 15
    assert login.status_code == 200
    assert 'id="token"' in login.text
    # The sign-in page says nothing of the backend.
    assert "memory://" not in login.text
    assert css.status_code == 200
    assert (await queue.stats()).ready == 1


async def test_signed_in_the_pages_are_read_and_the_sign_in_returns_to_the_page() -> None:
    _, board = await _board(guard=Guard(TOKEN), actions=False)
    async with client(board) as http:
        asked = await http.get("/queues/jobs?limit=5")
        form = await http.get(asked.headers["location"])
        signed = await http.post("/login", data={"token": TOKEN, "next": "/queues/jobs?limit=5"})
        page = await http.get(signed.headers["location"])
        api = await http.get("/api/queues/jobs/messages")
        dead = await http.get("/queues/jobs/dead")
        act = await http.post(
            "/queues/jobs/dead/action",
            data={"action": "purge", "id": "all", "csrf": board.guard.csrf},  # type: ignore[union-attr]
        )
    await board.queues.aclose()

    assert asked.headers["location"] == "/login?next=%2Fqueues%2Fjobs%3Flimit%3D5"
    assert 'name="next" value="/queues/jobs?limit=5"' in form.text
    assert signed.status_code == 303
    assert signed.headers["location"] == "/queues/jobs?limit=5"
    assert page.status_code == 200
    assert SECRET_PAYLOAD in page.text
    assert "memory://" in page.text
    assert api.status_code == 200
    # A token that only reads: no action offered, and one posted is refused.
    assert dead.status_code == 200
    assert "Retry" not in dead.text
    assert "read-only" in dead.text
    assert act.status_code == 403
    assert "--allow-actions" in act.text


async def test_the_api_takes_the_token_as_a_bearer_header_and_pages_do_not() -> None:
    _, board = await _board(guard=Guard(TOKEN))
    async with client(board) as http:
        good = await http.get("/api/queues", headers={"authorization": f"Bearer {TOKEN}"})
        lower = await http.get("/api/queues", headers={"authorization": f"bearer {TOKEN}"})
        wrong = await http.get("/api/queues", headers={"authorization": f"Bearer {TOKEN}x"})
        basic = await http.get("/api/queues", headers={"authorization": f"Basic {TOKEN}"})
        page = await http.get("/", headers={"authorization": f"Bearer {TOKEN}"})
    await board.queues.aclose()

    assert good.status_code == 200
    assert [q["name"] for q in good.json()["queues"]] == ["jobs"]
    assert lower.status_code == 200
    assert wrong.status_code == 401
    assert basic.status_code == 401
    assert page.status_code == 303


async def test_without_a_token_the_dashboard_is_read_by_anyone_who_reaches_it() -> None:
    _, board = await _board(guard=None)
    async with client(board) as http:
        page = await http.get("/queues/jobs")
        api = await http.get("/api/queues")
        login = await http.get("/login")
    await board.queues.aclose()

    assert page.status_code == 200
    assert SECRET_PAYLOAD in page.text
    assert "read-only" in page.text
    assert api.status_code == 200
    assert login.status_code == 403


async def test_a_sign_in_goes_back_only_to_a_page_of_the_dashboard() -> None:
    _, board = await _board(guard=Guard(TOKEN))
    async with client(board) as http:
        away = await http.post("/login", data={"token": TOKEN, "next": "//evil.example/x"})
        failed = await http.post("/login", data={"token": "wrong", "next": "/schedules"})
    await board.queues.aclose()

    assert away.headers["location"] == "/"
    assert failed.status_code == 403
    assert 'name="next" value="/schedules"' in failed.text


@pytest.mark.parametrize(
    ("given", "followed"),
    [
        ("/queues/jobs?limit=5", "/queues/jobs?limit=5"),
        ("/", "/"),
        (None, "/"),
        ("", "/"),
        ("//evil.example", "/"),
        ("/\\evil.example", "/"),
        ("https://evil.example/", "/"),
        ("javascript:alert(1)", "/"),
        ("/x\r\nSet-Cookie: a=b", "/"),
        ("/" + "a" * 3000, "/"),
    ],
)
def test_safe_next_follows_local_paths_only(given: str | None, followed: str) -> None:
    assert safe_next(given) == followed


async def test_an_anonymous_request_carries_the_security_headers() -> None:
    from taskrunner.dashboard.headers import SECURITY_HEADERS

    _, board = await _board(guard=Guard(TOKEN))
    transport = httpx.ASGITransport(app=create_app(board))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        answers = [await http.get("/"), await http.get("/api/queues"), await http.post("/")]
    await board.queues.aclose()

    for response in answers:
        for header, value in SECURITY_HEADERS.items():
            assert response.headers.get(header) == value, (response.request.url, header)
