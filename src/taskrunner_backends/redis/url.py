"""Backend URLs: splitting queue options from redis-py options (internal).

A URL is ``redis://[[user]:password@]host[:port][/db][?option=value&...]``, or
``rediss://`` for TLS, or ``unix:///path/to/socket?db=0``. Query options are either
this backend's (`QUEUE_OPTIONS`) or redis-py connection options (`REDIS_OPTIONS`),
which pass through to ``redis.asyncio.Redis.from_url``. Anything else is a
`ConfigurationError` naming the known options, so a typo never silently does nothing.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from taskrunner import mask_url
from taskrunner.errors import ConfigurationError

__all__ = ["QUEUE_OPTIONS", "REDIS_OPTIONS", "split_url"]

#: Options this backend reads from the URL query.
QUEUE_OPTIONS = frozenset({"namespace"})

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


def split_url(url: str) -> tuple[str, dict[str, str]]:
    """Split `url` into a URL for redis-py and this backend's own options.

    Raises:
        ConfigurationError: The scheme is not redis, rediss or unix, or the query
            names an unknown option (the message lists the known ones).
    """
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise ConfigurationError(
            f"unsupported scheme {parts.scheme!r} in {mask_url(url)}; "
            f"expected one of {', '.join(s + '://' for s in _SCHEMES)}",
            setting="url",
        )
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
    ours = {n: v for n, v in pairs if n in QUEUE_OPTIONS}
    theirs = [(n, v) for n, v in pairs if n in REDIS_OPTIONS]
    redis_url = urlunsplit(parts._replace(query=urlencode(theirs)))
    return redis_url, ours
