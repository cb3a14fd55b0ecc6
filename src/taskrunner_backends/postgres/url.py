"""PostgreSQL backend URLs: our options apart from libpq's (internal).

``postgresql://[user[:password]@]host[:port]/database[?option=value&...]`` (or
``postgres://``). Query options are either this backend's (`QUEUE_OPTIONS`) or libpq
connection parameters (`LIBPQ_OPTIONS`), which stay in the connection string psycopg
gets. Anything else is a `ConfigurationError` naming the known options, so a typo
never silently does nothing.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple
from urllib.parse import unquote, urlsplit

from taskrunner.errors import ConfigurationError
from taskrunner.redaction import mask_secrets, mask_url, url_secrets

from .schema import DEFAULT_SCHEMA, check_schema_name

__all__ = ["LIBPQ_OPTIONS", "QUEUE_OPTIONS", "PostgresUrl", "parse_url", "postgres_url"]

#: Options this backend reads from the URL query.
QUEUE_OPTIONS = frozenset({"schema", "pool_min", "pool_max", "pool_timeout", "migrate"})

#: libpq connection parameters accepted in the URL query and passed through.
LIBPQ_OPTIONS = frozenset(
    {
        "application_name",
        "channel_binding",
        "connect_timeout",
        "gssencmode",
        "host",
        "hostaddr",
        "keepalives",
        "keepalives_count",
        "keepalives_idle",
        "keepalives_interval",
        "load_balance_hosts",
        "options",
        "passfile",
        "port",
        "require_auth",
        "service",
        "sslcert",
        "sslcrl",
        "sslkey",
        "sslmode",
        "sslpassword",
        "sslrootcert",
        "target_session_attrs",
        "tcp_user_timeout",
        "user",
        "dbname",
        "password",
    }
)

_SCHEMES = ("postgresql", "postgres")


class PostgresUrl(NamedTuple):
    """A parsed backend URL.

    Attributes:
        conninfo: The URL without this backend's options, for libpq.
        schema: The schema holding the tables.
        pool_min: Connections the pool keeps open.
        pool_max: Most connections the pool opens.
        pool_timeout: Seconds a call waits for a free connection (and the first open
            for the server).
        migrate: ``auto``: apply missing migrations on open; ``never``: refuse a schema
            that is not at the latest version.
        display: The URL with its password masked.
        secrets: Strings to mask in messages.
    """

    conninfo: str
    schema: str
    pool_min: int
    pool_max: int
    pool_timeout: float
    migrate: Literal["auto", "never"]
    display: str
    secrets: tuple[str, ...]


def _bad(url: str, problem: str) -> ConfigurationError:
    return ConfigurationError(f"PostgreSQL URL {mask_url(url)}: {problem}", setting="url")


def _count(url: str, name: str, value: str, *, minimum: int) -> int:
    if not (value.isascii() and value.isdigit()) or int(value) < minimum:
        raise _bad(url, f"option {name}={value!r} must be a whole number >= {minimum}")
    return int(value)


def _seconds(url: str, name: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise _bad(url, f"option {name}={value!r} must be a finite number of seconds > 0")
    return seconds


def postgres_url(netloc: str, path: str, query: str) -> str:
    """``postgresql://netloc/path?query``, the ``//`` kept when there is no host.

    `urlunsplit` drops it for an empty authority (``postgresql:///db?host=/run`` would
    become ``postgresql:/db?...``), which libpq does not read as a URI at all.
    """
    return f"postgresql://{netloc}{path}" + (f"?{query}" if query else "")


def parse_url(url: str) -> PostgresUrl:
    """Split `url` into libpq's connection string and this backend's options.

    Raises:
        ConfigurationError: Not a postgresql:// or postgres:// URL, an unencoded ``@``
            (or ``/`` before one) in the user information, an unknown option,
            an option given twice, or a bad value (each named in the message, the
            password masked).
    """
    if not isinstance(url, str):
        raise ConfigurationError(
            f"PostgreSQL URL must be a string, got {type(url).__name__}", setting="url"
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _bad(url, f"cannot be parsed ({mask_secrets(str(exc), url_secrets(url))})") from None
    if parts.scheme.lower() not in _SCHEMES:
        raise _bad(url, "the scheme must be postgresql:// or postgres://")
    if parts.netloc.count("@") > 1 or "@" in parts.path:
        # libpq ends the user information at the *first* "@" (urllib at the last): the
        # rest of the password would be taken for the host, and echoed in its errors.
        raise _bad(
            url,
            "has an '@' after its user information: the characters /, ?, # and @ in a "
            "user name or password must be percent-encoded (%2F, %3F, %23, %40), e.g. "
            "with urllib.parse.quote(password, safe='')",
        )
    ours: dict[str, str] = {}
    # libpq's options keep their spelling as written: libpq percent-decodes URL query
    # values itself and reads "+" as "+", so decoding and re-encoding them here (as
    # urllib does, "+" meaning space) would change values such as options=-c%20x.
    libpq: list[str] = []
    seen: set[str] = set()
    for piece in parts.query.split("&") if parts.query else ():
        raw_name, equals, raw_value = piece.partition("=")
        name = unquote(raw_name)
        if not equals or not name:
            raise _bad(url, f"query part {name!r} is not name=value")
        if name in seen:
            raise _bad(url, f"option {name!r} is given twice")
        seen.add(name)
        if name in QUEUE_OPTIONS:
            try:
                ours[name] = unquote(raw_value, errors="strict")
            except UnicodeDecodeError:
                raise _bad(url, f"option {name} is not UTF-8 once percent-decoded") from None
        elif name in LIBPQ_OPTIONS:
            libpq.append(piece)
        else:
            known = ", ".join(sorted(QUEUE_OPTIONS | LIBPQ_OPTIONS))
            raise _bad(url, f"unknown option {name!r}; known options: {known}")
    schema = ours.get("schema", DEFAULT_SCHEMA)
    try:
        check_schema_name(schema)
    except ConfigurationError as exc:
        raise _bad(url, str(exc)) from None
    pool_min = _count(url, "pool_min", ours.get("pool_min", "1"), minimum=1)
    pool_max = _count(url, "pool_max", ours.get("pool_max", "10"), minimum=1)
    if pool_max < pool_min:
        raise _bad(url, f"pool_max={pool_max} is below pool_min={pool_min}")
    pool_timeout = _seconds(url, "pool_timeout", ours.get("pool_timeout", "5"))
    migrate = ours.get("migrate", "auto").lower()
    if migrate not in ("auto", "never"):
        raise _bad(url, f"option migrate={ours['migrate']!r} must be auto or never")
    conninfo = postgres_url(parts.netloc, parts.path, "&".join(libpq))
    return PostgresUrl(
        conninfo=conninfo,
        schema=schema,
        pool_min=pool_min,
        pool_max=pool_max,
        pool_timeout=pool_timeout,
        migrate="auto" if migrate == "auto" else "never",
        display=mask_url(url),
        secrets=url_secrets(url),
    )
