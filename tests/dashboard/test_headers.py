"""Every response of the dashboard carries its security headers."""

from __future__ import annotations

import re

import httpx
from starlette.routing import Mount, Route

from taskrunner.dashboard import Guard, create_app
from taskrunner.dashboard.headers import SECURITY_HEADERS
from taskrunner_backends.memory import open_from_url
from tests.dashboard.support import TOKEN, dashboard, memory_url

# A value for each path parameter a route may have.
_PARAMS = {"name": "jobs", "dead_id": "no-such-letter", "message_id": "no-such-message"}


def _check(response: httpx.Response) -> None:
    for header, value in SECURITY_HEADERS.items():
        assert response.headers.get(header) == value, (response.request.url, header)
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp


async def test_every_route_answers_with_the_security_headers() -> None:
    url = memory_url()
    await (await open_from_url(url, queue_name="jobs")).add([b"x"])
    board = dashboard(url, ["jobs"], guard=Guard(TOKEN))
    app = create_app(board)
    transport = httpx.ASGITransport(app=app)
    seen: list[int] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        # Twice: refused without a session (redirects, 401s), then answered signed in.
        for _ in range(2):
            for route in app.routes:
                if isinstance(route, Mount):
                    # The static files, one that exists and one that does not.
                    for leaf in ("dashboard.css", "dashboard.js", "missing.txt"):
                        response = await http.get(f"{route.path}/{leaf}")
                        _check(response)
                        seen.append(response.status_code)
                    continue
                assert isinstance(route, Route), route
                path = re.sub(r"{(\w+)(:\w+)?}", lambda m: _PARAMS[m.group(1)], route.path)
                for method in sorted(route.methods or {"GET"}):
                    if path == "/logout" and method == "POST":
                        continue  # would end the session of the second round
                    response = await http.request(method, path)
                    _check(response)
                    seen.append(response.status_code)
            # Errors and redirects: an unknown path, a wrong method, a refused Host.
            _check(await http.get("/no/such/page"))
            _check(await http.delete("/login"))
            _check(await http.get("/", headers={"host": "evil.example"}))
            signed = await http.post("/login", data={"token": TOKEN})
            assert signed.status_code == 303
            _check(signed)
    await board.queues.aclose()
    assert len(seen) > 2 * len(app.routes)
    # Every kind of answer was among them.
    assert {200, 303, 400, 401, 403, 404} <= set(seen)
