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

__all__ = ["GroupMissingError", "translate_errors"]


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
