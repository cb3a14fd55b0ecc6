"""The one boundary where redis-py exceptions become taskrunner errors (internal).

Every call into redis-py runs inside `translate_errors`, so no `redis.exceptions`
type, `OSError` or `asyncio.TimeoutError` reaches the runner. The original exception
is always chained (``raise ... from exc``).

==========================================  ===============================
redis-py / stdlib                           taskrunner
==========================================  ===============================
ConnectionError, TimeoutError, OSError,      BackendUnavailableError
BusyLoadingError, READONLY, TRYAGAIN,
MASTERDOWN, CLUSTERDOWN
AuthenticationError, NoPermissionError       BackendError (retrying will not help)
any other RedisError (e.g. OOM)              BackendError
==========================================  ===============================

A NOGROUP reply is translated into the private `GroupMissingError` so the queue can
recreate its consumer group and retry; it never leaves the backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis.exceptions as rx

from taskrunner.errors import BackendError, BackendUnavailableError

__all__ = ["GroupMissingError", "credentials_refused", "translate_errors"]


class GroupMissingError(BackendError):
    """The stream or its consumer group does not exist (a NOGROUP reply); internal."""


# Reply prefixes meaning "this server cannot serve you right now"; a later retry,
# possibly against a promoted replica, may succeed.
_TRANSIENT_PREFIXES = ("READONLY", "LOADING", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "BUSY ")


_TRANSIENT_TYPES = (rx.ReadOnlyError, rx.TryAgainError, rx.ClusterDownError)


@contextmanager
def translate_errors(action: str) -> Iterator[None]:
    """Translate exceptions raised inside the block; `action` names what was attempted."""
    try:
        yield
    except BackendError:
        raise
    except (rx.AuthenticationError, rx.AuthorizationError, rx.NoPermissionError) as exc:
        raise BackendError(f"{action}: the server refused the credentials: {exc}") from exc
    except (rx.ConnectionError, rx.TimeoutError, OSError, TimeoutError) as exc:
        raise BackendUnavailableError(f"{action}: server unavailable: {exc}") from exc
    except rx.ResponseError as exc:
        message = str(exc)
        if message.startswith("NOGROUP"):
            raise GroupMissingError(f"{action}: {message}") from exc
        # redis-py strips the prefix of the cluster errors it has classes for.
        if message.startswith(_TRANSIENT_PREFIXES) or isinstance(exc, _TRANSIENT_TYPES):
            raise BackendUnavailableError(f"{action}: server unavailable: {message}") from exc
        raise BackendError(f"{action}: the server replied with an error: {message}") from exc
    except rx.RedisError as exc:
        raise BackendError(f"{action}: {exc}") from exc


def credentials_refused(
    error: BackendError, server: str, username: str | None, password: bool
) -> BackendError:
    """`error` said clearly when it is the server refusing to let us in; else `error`.

    `server` names the server as users may see it (a masked URL). The server's own
    reply (about HELLO, or "invalid username-password pair") does not say whether
    the URL lacks a password or has a wrong one; the URL tells which.
    """
    if not isinstance(error.__cause__, rx.AuthenticationError):
        return error
    if not password:
        message = (
            f"the server at {server} needs a password and none was given: put it in the "
            "URL (redis://:PASSWORD@host:port/db, or redis://USER:PASSWORD@... for an "
            "ACL user)"
        )
    else:
        user = f" of user {username!r}" if username else ""
        message = (
            f"the server at {server} refused the password{user}: it is wrong, or the "
            "user does not exist or is disabled"
        )
    return BackendError(message)
