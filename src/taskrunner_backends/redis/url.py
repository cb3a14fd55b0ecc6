"""Backend URLs: splitting queue options from redis-py options (internal).

A URL is ``redis://[[user]:password@]host[:port][/db][?option=value&...]`` (the path is
empty or a database number), or
``rediss://`` for TLS, or ``unix:///path/to/socket?db=0``. Query options are either
this backend's (`QUEUE_OPTIONS`) or redis-py connection options (`REDIS_OPTIONS`),
which pass through to ``redis.asyncio.Redis.from_url``. Anything else is a
`ConfigurationError` naming the known options, so a typo never silently does nothing.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit

from taskrunner.errors import ConfigurationError
from taskrunner.redaction import mask_secrets, mask_url, url_secrets

__all__ = ["QUEUE_OPTIONS", "REDIS_OPTIONS", "join_url", "split_url"]

#: Options this backend reads from the URL query.
QUEUE_OPTIONS = frozenset({"namespace", "durable"})

#: redis-py connection options accepted in the URL query and passed through.
REDIS_OPTIONS = frozenset(
    {
        "db",
        "client_name",
        "health_check_interval",
        "legacy_responses",
        "max_connections",
        "protocol",
        "retry_on_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_read_size",
        "socket_timeout",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_cert_reqs",
        "ssl_certfile",
        "ssl_check_hostname",
        "ssl_exclude_verify_flags",
        "ssl_include_verify_flags",
        "ssl_keyfile",
        "ssl_min_version",
        "timeout",
    }
)

_SCHEMES = ("redis", "rediss", "unix")

# The path of a redis:// URL: a database number, ASCII digits only.
_DATABASE_PATH = re.compile(r"/[0-9]+")
# str.isdigit() would accept other scripts' digits, which int() reads but Redis never shows.
_DIGITS = re.compile(r"[0-9]+")

# What each redis-py option's value must look like, checked here so a bad value is a
# configuration error naming the option, not a connection failure or a traceback.
_POSITIVE_SECONDS = frozenset(
    {"socket_timeout", "socket_connect_timeout", "timeout", "health_check_interval"}
)
_NON_NEGATIVE_INTEGERS = frozenset({"db", "max_connections", "socket_read_size"})
_BOOLEANS = frozenset(
    {"retry_on_timeout", "socket_keepalive", "ssl_check_hostname", "legacy_responses"}
)
_BOOLEAN_WORDS = frozenset({"0", "1", "true", "false", "yes", "no", "on", "off"})
_CHOICES = {"protocol": ("2", "3"), "ssl_cert_reqs": ("none", "optional", "required")}


def _check_value(name: str, value: str, url: str) -> None:
    problem = None
    if name in _POSITIVE_SECONDS:
        try:
            seconds = float(value)
        except ValueError:
            seconds = float("nan")
        if not 0 < seconds < float("inf"):
            problem = "must be a positive number of seconds"
    elif name in _NON_NEGATIVE_INTEGERS:
        if not _DIGITS.fullmatch(value):
            problem = "must be a whole number >= 0"
    elif name in _BOOLEANS:
        if value.lower() not in _BOOLEAN_WORDS:
            problem = "must be true or false"
    elif name in _CHOICES and value.lower() not in _CHOICES[name]:
        problem = f"must be one of {', '.join(_CHOICES[name])}"
    if problem is not None:
        raise ConfigurationError(
            f"option {name}={value!r} in {mask_url(url)} {problem}", setting="url"
        )


def _check_authority(url: str, parts: SplitResult) -> None:
    """Refuse URLs whose user information leaked past the host, and ports that are no number.

    An unencoded ``/``, ``?`` or ``#`` in a password ends the host part early: the rest
    of the password lands in the path or query (with an ``@`` in it), and redis-py would
    connect somewhere else or report part of the password as a bad port. The messages
    here never quote any part of the URL but its masked form.
    """
    if "@" in parts.path or "@" in parts.query or "@" in parts.fragment:
        raise ConfigurationError(
            f"{mask_url(url)} has an '@' after its host part: the characters /, ?, # and @ "
            "in a user name, password or option value must be percent-encoded (%2F, %3F, "
            "%23, %40), e.g. with urllib.parse.quote(password, safe='')",
            setting="url",
        )
    try:
        parts.port  # noqa: B018 - parsing the port is the check
    except ValueError:
        raise ConfigurationError(
            f"the port in {mask_url(url)} must be a number from 0 to 65535",
            setting="url",
        ) from None


def _check_database_path(url: str, path: str, query_db: str | None) -> None:
    """The path of a redis:// or rediss:// URL must be empty, ``/`` or ``/N``.

    redis-py reads the path as the database number by deleting every ``/`` and
    calling int(), and silently uses database 0 when that fails: ``/abc`` would
    quietly share database 0 with whatever lives there, ``/0/1`` would be database 1.
    """
    if path in ("", "/"):
        return
    if not _DATABASE_PATH.fullmatch(path):
        raise ConfigurationError(
            f"database path {path!r} in {mask_url(url)}: the path of a Redis URL is empty "
            "or /N, a database number (0, 1, 2, ...)",
            setting="url",
        )
    if query_db is not None:
        raise ConfigurationError(
            f"{mask_url(url)} names the database both in the path ({path}) and as "
            f"db={query_db}; give it once",
            setting="url",
        )


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """Split `url` into a URL for redis-py and this backend's own options.

    Raises:
        ConfigurationError: The URL cannot be split (an unbalanced ``[`` of an IPv6
            host), the scheme is not redis, rediss or unix, a password or
            option holds an unencoded ``/``, ``?``, ``#`` or ``@`` that breaks the URL's
            structure, the port is no number, the path is not a database number (or
            repeats the ``db`` option), the query names an unknown option (the
            message lists the known ones), a TLS option on a URL without TLS, or a value
            of the wrong kind.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        # urllib may quote the host part, user information included.
        problem = mask_secrets(str(exc), url_secrets(url))
        raise ConfigurationError(
            f"{mask_url(url)} cannot be parsed: {problem} (an IPv6 address is written in "
            "brackets: redis://[::1]:6379/0)",
            setting="url",
        ) from None
    if parts.scheme not in _SCHEMES:
        raise ConfigurationError(
            f"unsupported scheme {parts.scheme!r} in {mask_url(url)}; "
            f"expected one of {', '.join(s + '://' for s in _SCHEMES)}",
            setting="url",
        )
    _check_authority(url, parts)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    names = [name for name, _ in pairs]
    unknown = sorted({n for n in names if n not in QUEUE_OPTIONS and n not in REDIS_OPTIONS})
    if unknown:
        known = ", ".join(sorted(QUEUE_OPTIONS | REDIS_OPTIONS))
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)} in {mask_url(url)}; known: {known}",
            setting="url",
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigurationError(
            f"option(s) {', '.join(repeated)} given more than once in {mask_url(url)}",
            setting="url",
        )
    tls_only = sorted(n for n in names if n.startswith("ssl_"))
    if tls_only and parts.scheme != "rediss":
        raise ConfigurationError(
            f"option(s) {', '.join(tls_only)} in {mask_url(url)} need a rediss:// (TLS) URL",
            setting="url",
        )
    for name, value in pairs:
        _check_value(name, value, url)
    if parts.scheme != "unix":
        _check_database_path(url, parts.path, dict(pairs).get("db"))
    ours = {n: v for n, v in pairs if n in QUEUE_OPTIONS}
    theirs = [(n, v) for n, v in pairs if n in REDIS_OPTIONS]
    return join_url(parts._replace(query=urlencode(theirs))), ours


def join_url(parts: SplitResult) -> str:
    """`parts` as a URL that always starts ``<scheme>://``.

    Not `urlunsplit`: for a scheme outside urllib's ``uses_netloc`` it drops the ``//``
    of an empty authority (``unix:///run/redis.sock`` becomes ``unix:/run/redis.sock``),
    and redis-py 8.2 refuses a URL that does not start with ``<scheme>://``.
    """
    query = f"?{parts.query}" if parts.query else ""
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return f"{parts.scheme}://{parts.netloc}{parts.path}{query}{fragment}"
