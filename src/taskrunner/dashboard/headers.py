"""Security headers the dashboard puts on every response it sends.

An ASGI middleware outside every other one, so pages, the API, static files, errors
(a refused Host header too) and redirects all carry them. The pages load their
scripts and styles from ``/static/`` only, so the policy needs no 'unsafe-inline'.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["SECURITY_HEADERS", "SecurityHeadersMiddleware"]

SECURITY_HEADERS = {
    # No page of another origin may frame the dashboard (clickjacking of the actions),
    # nor may an injected tag load code from elsewhere or post a form away.
    "Content-Security-Policy": (
        "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
        "form-action 'self'; object-src 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # URLs carry queue names and message ids; they stay on the dashboard.
    "Referrer-Policy": "no-referrer",
}


class SecurityHeadersMiddleware:
    """Sets `SECURITY_HEADERS` on every HTTP response of `app` (replacing any set)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection, the headers added to its response start."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
