"""Sign-in for reading: a dashboard with a token serves nothing to a stranger.

With a `Guard` (the dashboard has a token), every request needs a live session
cookie, except the sign-in page and the stylesheet it uses (`PUBLIC_PATHS`). The
JSON API also takes the token as ``Authorization: Bearer TOKEN``, for scripts and
monitoring that cannot hold a cookie. A request without either gets:

* a page (GET or HEAD): a 303 redirect to ``/login?next=PATH``, back to PATH once
  signed in;
* the API: 401 with ``WWW-Authenticate: Bearer`` and a JSON error;
* anything else (a form posted without a session): 403.

The check runs before routing, so an unknown path says no more than a known one.
"""

from __future__ import annotations

import urllib.parse

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from taskrunner.clock import Clock
from taskrunner.dashboard.security import SESSION_COOKIE, Guard

__all__ = ["PUBLIC_PATHS", "SignInMiddleware", "safe_next"]

# What the sign-in page needs, and sign-out (CSRF-checked; it only ends a session):
# nothing here reads the backend.
PUBLIC_PATHS = frozenset({"/login", "/logout", "/static/dashboard.css"})
# A `next` longer than this is dropped (the overview is shown after sign-in instead).
_MAX_NEXT = 2000


def safe_next(target: str | None) -> str:
    """`target` when it is a path of this dashboard, else ``/``.

    Only a local absolute path is followed, so a link to ``/login?next=...`` cannot
    send a browser that signs in to another site: ``//evil.example``, a backslash
    second (browsers read it as a slash) and ``https://...`` all become ``/``.
    """
    if (
        not target
        or len(target) > _MAX_NEXT
        or not target.startswith("/")
        or target[1:2] in ("/", "\\")
        or any(ord(c) < 0x20 or c == "\x7f" for c in target)
    ):
        return "/"
    return target


class SignInMiddleware:
    """Refuses every request without a session of `guard` (see the module docstring).

    Args:
        app: The application behind it.
        guard: Whose sessions and token are accepted.
        clock: The dashboard's clock (a session's age is its monotonic time).
    """

    def __init__(self, app: ASGIApp, *, guard: Guard, clock: Clock) -> None:
        self.app = app
        self.guard = guard
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request when it is signed in or public, else refuse it."""
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if self._allowed(request):
            await self.app(scope, receive, send)
            return
        await self._refusal(request)(scope, receive, send)

    def _allowed(self, request: Request) -> bool:
        if self.guard.signed_in(request.cookies.get(SESSION_COOKIE), self.clock.monotonic()):
            return True
        if not request.url.path.startswith("/api/"):
            return False
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.guard.token_matches(given.strip())

    def _refusal(self, request: Request) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse(
                {"error": "sign in first: a session cookie or Authorization: Bearer TOKEN"},
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="taskrunner dashboard"'},
            )
        if request.method in ("GET", "HEAD"):
            path = request.url.path
            if request.url.query:
                path += "?" + request.url.query
            query = "" if path == "/" else "?" + urllib.parse.urlencode({"next": path})
            return RedirectResponse("/login" + query, status_code=303)
        return PlainTextResponse("sign in with the dashboard token first", status_code=403)
