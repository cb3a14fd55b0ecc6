"""The dashboard's action token and CSRF check.

Actions (retry, purge) change the backend, so they need three things: the dashboard
was started with ``--allow-actions``; the browser holds a session cookie set by
signing in with the token (printed at start, or ``TASKRUNNER_DASHBOARD_TOKEN``, or
the older name ``TR_DASHBOARD_TOKEN``); and
the form carries the CSRF value derived from that token. A page of another origin can
make the browser send the cookie (it is also SameSite=Strict, so modern browsers do
not) but cannot read the CSRF value, so its forged form is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

__all__ = ["LEGACY_TOKEN_ENV", "SESSION_COOKIE", "TOKEN_ENV", "Guard", "token_from_env"]

SESSION_COOKIE = "taskrunner_dashboard"
# Reserved in taskrunner.settings, so the settings loader does not refuse it as unknown.
TOKEN_ENV = "TASKRUNNER_DASHBOARD_TOKEN"
# The first name, from before TASKRUNNER_DASHBOARD_TOKEN was reserved; still read.
LEGACY_TOKEN_ENV = "TR_DASHBOARD_TOKEN"
# Shorter tokens are guessable over a local network in hours.
MIN_TOKEN_LENGTH = 16


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

    Args:
        token: The action token; None makes a random one (read it from `token`).

    Raises:
        ValueError: `token` is shorter than 16 characters.
    """

    def __init__(self, token: str | None = None) -> None:
        if token is None:
            token = secrets.token_urlsafe(24)
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(
                f"the dashboard token must be at least {MIN_TOKEN_LENGTH} characters "
                f"(got {len(token)}); unset {TOKEN_ENV} and {LEGACY_TOKEN_ENV} to have one "
                "generated"
            )
        self.token = token
        key = token.encode()
        # The cookie holds a value derived from the token, not the token itself.
        self.session = hmac.new(key, b"session", hashlib.sha256).hexdigest()
        self.csrf = hmac.new(key, b"csrf", hashlib.sha256).hexdigest()

    def token_matches(self, given: str) -> bool:
        """Whether `given` is the token (constant time)."""
        return hmac.compare_digest(given.encode(), self.token.encode())

    def signed_in(self, cookie: str | None) -> bool:
        """Whether the session cookie value is this dashboard's (constant time)."""
        return cookie is not None and hmac.compare_digest(cookie.encode(), self.session.encode())

    def csrf_matches(self, given: str | None) -> bool:
        """Whether a form's CSRF value is this dashboard's (constant time)."""
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())
