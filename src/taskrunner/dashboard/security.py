"""The dashboard's action token and CSRF check.

Actions (retry, purge) change the backend, so they need three things: the dashboard
was started with ``--allow-actions``; the browser holds a session cookie set by
signing in with the token (printed at start, or ``TASKRUNNER_DASHBOARD_TOKEN``, or
the older name ``TR_DASHBOARD_TOKEN``), a session that expires (8 hours by
default) or ends at sign-out; and
the form carries the CSRF value derived from that token. A page of another origin can
make the browser send the cookie (it is also SameSite=Strict, so modern browsers do
not) but cannot read the CSRF value, so its forged form is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

__all__ = [
    "DEFAULT_SESSION_SECONDS",
    "LEGACY_TOKEN_ENV",
    "SESSION_COOKIE",
    "TOKEN_ENV",
    "Guard",
    "token_from_env",
]

SESSION_COOKIE = "taskrunner_dashboard"
# Reserved in taskrunner.settings, so the settings loader does not refuse it as unknown.
TOKEN_ENV = "TASKRUNNER_DASHBOARD_TOKEN"
# The first name, from before TASKRUNNER_DASHBOARD_TOKEN was reserved; still read.
LEGACY_TOKEN_ENV = "TR_DASHBOARD_TOKEN"
# Shorter tokens are guessable over a local network in hours.
MIN_TOKEN_LENGTH = 16
DEFAULT_SESSION_SECONDS = 8 * 3600.0
# Sessions kept at once; signing in needs the token, so this bounds only a mistake.
MAX_SESSIONS = 1000


def token_from_env(env: Mapping[str, str]) -> str | None:
    """The action token `env` gives (`TOKEN_ENV`, else `LEGACY_TOKEN_ENV`); None when neither.

    An empty value counts as unset, as for settings.

    Raises:
        ValueError: Both are set, to different values (which one is meant is unclear).
    """
    given, legacy = env.get(TOKEN_ENV) or None, env.get(LEGACY_TOKEN_ENV) or None
    if given is not None and legacy is not None and given != legacy:
        raise ValueError(
            f"{TOKEN_ENV} and {LEGACY_TOKEN_ENV} are both set, to different tokens; "
            f"unset {LEGACY_TOKEN_ENV}"
        )
    return given or legacy


class Guard:
    """Checks the session cookie and CSRF value of an action request.

    Signing in with the token opens a session: a random cookie value, its issue time
    kept here (server-side, so a copied or kept cookie is refused once it expires or
    is signed out, whatever its Max-Age). Times are the dashboard clock's monotonic
    seconds, passed in by the caller. Sessions live in this process: a restarted
    dashboard asks every browser to sign in again.

    Args:
        token: The action token; None makes a random one (read it from `token`).
        session_seconds: How long a session lasts from sign-in (default 8 hours).

    Raises:
        ValueError: `token` is shorter than 16 characters, or `session_seconds` is
            not positive.
    """

    def __init__(
        self, token: str | None = None, *, session_seconds: float = DEFAULT_SESSION_SECONDS
    ) -> None:
        if token is None:
            token = secrets.token_urlsafe(24)
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(
                f"the dashboard token must be at least {MIN_TOKEN_LENGTH} characters "
                f"(got {len(token)}); unset {TOKEN_ENV} and {LEGACY_TOKEN_ENV} to have one "
                "generated"
            )
        if not session_seconds > 0:
            raise ValueError(f"the session time must be positive, got {session_seconds}")
        self.token = token
        self.session_seconds = session_seconds
        self.csrf = hmac.new(token.encode(), b"csrf", hashlib.sha256).hexdigest()
        # Digest of each live session's cookie -> its issue time. Looked up by digest,
        # so the lookup's timing says nothing about the cookie values themselves.
        self._sessions: dict[bytes, float] = {}

    def token_matches(self, given: str) -> bool:
        """Whether `given` is the token (constant time)."""
        return hmac.compare_digest(given.encode(), self.token.encode())

    def sign_in(self, now: float) -> str:
        """Open a session issued at `now`; returns its cookie value (random, unguessable).

        Expired sessions are forgotten here, and past `MAX_SESSIONS` the oldest too.
        """
        for digest, issued in list(self._sessions.items()):
            if not self._live(issued, now):
                del self._sessions[digest]
        while len(self._sessions) >= MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]
        cookie = secrets.token_urlsafe(32)
        self._sessions[_digest(cookie)] = now
        return cookie

    def signed_in(self, cookie: str | None, now: float) -> bool:
        """Whether `cookie` is a live session of this dashboard.

        Live: signed in less than `session_seconds` before `now`, and not signed out.
        """
        if cookie is None:
            return False
        issued = self._sessions.get(_digest(cookie))
        return issued is not None and self._live(issued, now)

    def sign_out(self, cookie: str | None) -> None:
        """End the session of `cookie` (nothing when it is none of them)."""
        if cookie is not None:
            self._sessions.pop(_digest(cookie), None)

    def _live(self, issued: float, now: float) -> bool:
        return now - issued < self.session_seconds

    def csrf_matches(self, given: str | None) -> bool:
        """Whether a form's CSRF value is this dashboard's (constant time)."""
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())


def _digest(cookie: str) -> bytes:
    return hashlib.sha256(cookie.encode()).digest()
