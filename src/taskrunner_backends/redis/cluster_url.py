"""Redis Cluster URLs (internal).

``redis+cluster://[[user]:password@]host:port[,host:port...][?shards=K&...]`` names a
cluster.

``rediss+cluster://`` uses TLS. The hosts are startup nodes (any reachable one is
enough; redis-py discovers the rest with ``CLUSTER SLOTS``). Query options: this
backend's ``namespace`` and ``shards`` (1 to `MAX_SHARDS`, default 1), and the redis-py
connection options of `url.REDIS_OPTIONS` that a cluster connection takes (not ``db``:
a cluster has database 0 only). Anything else is a `ConfigurationError` naming the known
options; nothing is ever silently ignored.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from taskrunner.errors import ConfigurationError
from taskrunner.redaction import mask_url

from .url import REDIS_OPTIONS, _check_value

__all__ = ["CLUSTER_SCHEMES", "ClusterTarget", "split_cluster_url"]

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")

_OURS = frozenset({"namespace", "shards", "durable"})
# Options redis-py's cluster client does not take (db: a cluster has database 0 only).
_NOT_FOR_CLUSTERS = frozenset(
    {
        "db",
        "retry_on_timeout",
        "ssl_ca_path",
        "ssl_min_version",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
    }
)
_THEIRS = REDIS_OPTIONS - _NOT_FOR_CLUSTERS
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]+)):(?P<port>[0-9]{1,5})")
_MAX_SHARDS = 1024


class ClusterTarget:
    """What a cluster URL says: startup nodes, redis-py options and this backend's."""

    def __init__(
        self,
        nodes: list[tuple[str, int]],
        kwargs: dict[str, Any],
        namespace: str,
        shards: int,
        durable: str,
    ) -> None:
        self.durable = durable
        self.nodes = nodes
        self.kwargs = kwargs
        self.namespace = namespace
        self.shards = shards


def _option_value(name: str, value: str) -> Any:
    if name in ("socket_timeout", "socket_connect_timeout", "timeout", "health_check_interval"):
        return float(value)
    if name in ("max_connections", "socket_read_size"):
        return int(value)
    if name in ("retry_on_timeout", "socket_keepalive", "ssl_check_hostname", "legacy_responses"):
        return value.lower() in ("1", "true", "yes", "on")
    if name == "protocol":
        return int(value)
    return value


def split_cluster_url(url: str) -> ClusterTarget:
    """Parse a cluster URL.

    Raises:
        ConfigurationError: Another scheme, no ``host:port`` list, a port out of range,
            a path, an unknown or repeated option, ``shards`` not a whole number from 1
            to 1024, a TLS option without ``rediss+cluster``, or a value of the wrong kind.
    """
    masked = mask_url(url)
    parts = urlsplit(url)
    if parts.scheme not in CLUSTER_SCHEMES:
        raise ConfigurationError(
            f"unsupported scheme {parts.scheme!r} in {masked}; expected redis+cluster:// "
            "or rediss+cluster://",
            setting="url",
        )
    if "@" in parts.path or "@" in parts.query or "@" in parts.fragment:
        raise ConfigurationError(
            f"{masked} has an '@' after its host part: the characters /, ?, # and @ in a "
            "user name, password or option value must be percent-encoded",
            setting="url",
        )
    if parts.path not in ("", "/"):
        raise ConfigurationError(
            f"{masked}: a cluster URL has no path (a cluster has database 0 only)",
            setting="url",
        )
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    nodes: list[tuple[str, int]] = []
    for item in hostlist.split(","):
        match = _HOST_PORT.fullmatch(item.strip())
        if match is None or not 0 < int(match["port"]) < 65536:
            raise ConfigurationError(
                f"{masked}: each cluster node must be host:port with a port from 1 to "
                f"65535, separated by commas (got {item.strip()!r})",
                setting="url",
            )
        nodes.append((match["v6"] or match["host"], int(match["port"])))
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    names = [name for name, _ in pairs]
    unknown = sorted({n for n in names if n not in _OURS and n not in _THEIRS})
    if unknown:
        why = " (a cluster has database 0 only)" if "db" in unknown else ""
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)} in {masked}{why}; known: "
            f"{', '.join(sorted(_OURS | _THEIRS))}",
            setting="url",
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigurationError(
            f"option(s) {', '.join(repeated)} given more than once in {masked}", setting="url"
        )
    tls_only = sorted(n for n in names if n.startswith("ssl_"))
    if tls_only and parts.scheme != "rediss+cluster":
        raise ConfigurationError(
            f"option(s) {', '.join(tls_only)} in {masked} need a rediss+cluster:// (TLS) URL",
            setting="url",
        )
    options = dict(pairs)
    raw_shards = options.pop("shards", "1")
    if not re.fullmatch(r"[0-9]{1,4}", raw_shards) or not 1 <= int(raw_shards) <= _MAX_SHARDS:
        raise ConfigurationError(
            f"option shards={raw_shards!r} in {masked} must be a whole number from 1 to "
            f"{_MAX_SHARDS}",
            setting="url",
        )
    namespace = options.pop("namespace", "taskrunner")
    durable = options.pop("durable", "")
    kwargs: dict[str, Any] = {}
    for name, value in options.items():
        _check_value(name, value, url)
        kwargs[name] = _option_value(name, value)
    if "timeout" in kwargs:
        kwargs.setdefault("socket_timeout", kwargs.pop("timeout"))
    username, has_password, password = userinfo.partition(":")
    if username:
        kwargs["username"] = unquote(username)
    if has_password:
        kwargs["password"] = unquote(password)
    if parts.scheme == "rediss+cluster":
        kwargs["ssl"] = True
    return ClusterTarget(nodes, kwargs, namespace, int(raw_shards), durable)
