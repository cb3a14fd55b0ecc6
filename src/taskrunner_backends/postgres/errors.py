"""The one boundary where psycopg exceptions become taskrunner errors (internal).

Every call into psycopg runs inside `translate_errors`, so no ``psycopg`` or
``psycopg_pool`` type, `OSError` or `TimeoutError` reaches the runner. The original
exception is chained (``raise ... from exc``).

==============================================  =================================
psycopg / psycopg_pool / stdlib                 taskrunner
==============================================  =================================
OperationalError (connection lost, server       BackendUnavailableError
shutting down, too many clients), PoolTimeout,
PoolClosed, lock/statement timeouts,
serialization failures, deadlocks, OSError
InsufficientPrivilege, InvalidPassword,         BackendError (retrying will not help)
UndefinedTable (schema not migrated), any other
psycopg.Error
==============================================  =================================
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
import psycopg.errors as pe
import psycopg_pool

from taskrunner.errors import BackendError, BackendUnavailableError
from taskrunner.redaction import mask_secrets

__all__ = ["translate_errors"]

# Errors a later retry may not meet: the runner backs off and tries again.
_TRANSIENT = (
    pe.LockNotAvailable,
    pe.QueryCanceled,
    pe.SerializationFailure,
    pe.DeadlockDetected,
    pe.TooManyConnections,
    pe.AdminShutdown,
    pe.CrashShutdown,
    pe.CannotConnectNow,
    pe.ReadOnlySqlTransaction,
)


@contextmanager
def translate_errors(action: str, secrets: Sequence[str] = ()) -> Iterator[None]:
    """Translate exceptions raised inside the block; `action` names what was attempted.

    `secrets` (the URL's password) are masked in every message, since libpq may echo
    parts of the connection string.
    """
    try:
        yield
    except BackendError:
        raise
    except psycopg_pool.PoolTimeout as exc:
        # Only the pool knows whether its connections are all lent out or its attempts
        # to connect failed: `Database` says which before this sees it (here: opening).
        raise BackendUnavailableError(
            f"{action}: no connection from the pool in time (pool_timeout): "
            f"{mask_secrets(str(exc), secrets)}"
        ) from exc
    except psycopg_pool.PoolClosed as exc:
        raise BackendUnavailableError(f"{action}: the connection pool is closed") from exc
    except (
        pe.InsufficientPrivilege,
        pe.InvalidPassword,
        pe.InvalidAuthorizationSpecification,
    ) as exc:
        raise BackendError(
            f"{action}: the server refused: {mask_secrets(str(exc), secrets)}"
        ) from exc
    except pe.UndefinedTable as exc:
        raise BackendError(
            f"{action}: a table is missing (run `taskrunner db migrate --url ...`): "
            f"{mask_secrets(str(exc), secrets)}"
        ) from exc
    except (*_TRANSIENT, psycopg.OperationalError, psycopg.InterfaceError) as exc:
        raise BackendUnavailableError(
            f"{action}: server unavailable: {mask_secrets(str(exc), secrets)}"
        ) from exc
    except psycopg.Error as exc:
        raise BackendError(f"{action}: {mask_secrets(str(exc), secrets)}") from exc
    except (OSError, TimeoutError) as exc:
        raise BackendUnavailableError(
            f"{action}: server unavailable: {mask_secrets(str(exc), secrets)}"
        ) from exc
