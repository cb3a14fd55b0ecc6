"""Which server a queue talks to, and whether it is new enough."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from taskrunner.errors import UnsupportedServerError

__all__ = ["ServerInfo", "check_server"]

_MINIMUM_VERSIONS = {"redis": (7, 0, 0), "valkey": (7, 2, 0)}


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What `check_server` found.

    Attributes:
        name: ``"redis"`` or ``"valkey"``.
        version: The server's own version (Valkey's, not its Redis compatibility level).
    """

    name: Literal["redis", "valkey"]
    version: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.name.capitalize()} {'.'.join(map(str, self.version))}"


def _parse_version(text: str) -> tuple[int, ...]:
    numbers = []
    for part in text.strip().split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        numbers.append(int(digits.group()))
    return tuple(numbers)


def check_server(info: dict[str, str]) -> ServerInfo:
    """Identify the server from its ``INFO server`` fields and check it is new enough.

    Valkey reports ``redis_version:7.2.4`` for compatibility; its own version is in
    ``valkey_version`` (and ``server_name:valkey``), which is what counts for it.

    Raises:
        UnsupportedServerError: Redis older than 7.0, Valkey older than 7.2, or no
            version reported at all.
    """
    name: Literal["redis", "valkey"]
    if "valkey_version" in info or info.get("server_name", "").lower() == "valkey":
        name, raw = "valkey", info.get("valkey_version", info.get("redis_version", ""))
    else:
        name, raw = "redis", info.get("redis_version", "")
    version = _parse_version(raw)
    if not version:
        raise UnsupportedServerError(
            "the server reported no version in INFO server; taskrunner needs "
            "Redis >= 7.0 or Valkey >= 7.2"
        )
    found = ServerInfo(name=name, version=version)
    minimum = _MINIMUM_VERSIONS[name]
    if version < minimum:
        raise UnsupportedServerError(
            f"{found} is too old: taskrunner's Redis Streams backend needs "
            f"{name.capitalize()} >= {'.'.join(map(str, minimum[:2]))} "
            "(skipping of deleted entries by XCLAIM, "
            "consumer-group lag)"
        )
    return found


def _parse_info(raw: bytes) -> dict[str, str]:
    fields = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        if line and not line.startswith("#") and ":" in line:
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    return fields
