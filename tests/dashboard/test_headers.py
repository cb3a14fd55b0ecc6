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
    seen = 0
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        for route in app.routes:
            if isinstance(route, Mount):
                # The static files, one that exists and one that does not.
                for leaf in ("dashboard.css", "dashboard.js", "missing.txt"):
                    _check(await http.get(f"{route.path}/{leaf}"))
                    seen += 1
                continue
            assert isinstance(route, Route), route
            path = re.sub(r"{(\w+)(:\w+)?}", lambda m: _PARAMS[m.group(1)], route.path)
            for method in sorted(route.methods or {"GET"}):
                _check(await http.request(method, path))
                seen += 1
        # Errors and redirects: an unknown path, a wrong method, a refused Host, a sign-in.
        _check(await http.get("/no/such/page"))
        _check(await http.delete("/login"))
        _check(await http.get("/", headers={"host": "evil.example"}))
        signed = await http.post("/login", data={"token": TOKEN})
        assert signed.status_code == 303
        _check(signed)
    await board.queues.aclose()
    assert seen > len(app.routes)
