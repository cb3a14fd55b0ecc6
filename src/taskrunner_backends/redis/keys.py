"""Every Redis key and group name of one queue, derived in one place (internal).

All keys of a queue share one hash tag, the queue name in braces, so a Redis Cluster
keeps them in one slot and every Lua script may touch all of them::

    {namespace}:{{{queue}}}:stream    the queue: ready and in-flight messages
    {namespace}:{{{queue}}}:dead      dead letters (a stream, oldest first)
    {namespace}:{{{queue}}}:delayed   released messages not yet due (zset: due ms -> parked id)
    {namespace}:{{{queue}}}:parked    the bodies of those messages (a stream)
    {namespace}:{{{queue}}}:origins   re-added entries of released messages
                                       (hash: entry id -> "message id/earlier deliveries")
    {namespace}:{{{queue}}}:workers   live worker processes (hash: instance -> entry)

The consumer group on the stream is always `GROUP`. Everything a namespace owns
matches `QueueKeys.namespace_pattern`, which is how tests clean up after themselves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from taskrunner.errors import ConfigurationError

__all__ = ["GROUP", "QueueKeys", "namespace_pattern"]

#: The one consumer group every worker of a queue joins.
GROUP = "taskrunner"

# Braces would move the hash tag, glob characters would break SCAN MATCH cleanup,
# and whitespace or control characters make keys unreadable in redis-cli.
_NAME = re.compile(r"[A-Za-z0-9_.:\-/@+=]+")


def _check_name(value: str, setting: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):  # type: ignore[redundant-expr]
        raise ConfigurationError(
            f"{setting} must be a non-empty string of letters, digits and _.:-/@+=, got {value!r}",
            setting=setting,
        )
    return value


def namespace_pattern(namespace: str) -> str:
    """The SCAN MATCH pattern covering every key of every queue in `namespace`."""
    return f"{_check_name(namespace, 'namespace')}:*"


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue.

    Raises:
        ConfigurationError: The namespace or queue name contains characters that
            would break the hash tag or key-pattern matching.
    """

    namespace: str
    queue_name: str

    def __post_init__(self) -> None:
        _check_name(self.namespace, "namespace")
        _check_name(self.queue_name, "queue_name")

    @property
    def _prefix(self) -> str:
        return f"{self.namespace}:{{{self.queue_name}}}"

    @property
    def stream(self) -> str:
        """The stream holding ready and in-flight messages."""
        return f"{self._prefix}:stream"

    @property
    def dead(self) -> str:
        """The dead-letter stream."""
        return f"{self._prefix}:dead"

    @property
    def delayed(self) -> str:
        """The sorted set of released messages waiting for their delay (score: due ms)."""
        return f"{self._prefix}:delayed"

    @property
    def parked(self) -> str:
        """The stream holding the fields of delayed messages until they are due."""
        return f"{self._prefix}:parked"

    @property
    def origins(self) -> str:
        """The hash naming the message and earlier delivery count of each re-added entry.

        Released messages come back as new stream entries; the entry's own fields say
        where it came from, but when the entry is deleted underneath a lease this hash
        still lets the dead letter name the right message and delivery count.
        """
        return f"{self._prefix}:origins"

    @property
    def workers(self) -> str:
        """The hash of worker-registry entries (instance -> expiry and `WorkerInfo` JSON)."""
        return f"{self._prefix}:workers"

    @property
    def group(self) -> str:
        """The consumer group name."""
        return GROUP

    @property
    def all(self) -> tuple[str, str, str, str, str]:
        """The message keys, in the order the Lua scripts expect them in KEYS.

        The worker registry (`workers`) is not among them: purging a queue leaves
        the registry alone.
        """
        return (self.stream, self.dead, self.delayed, self.parked, self.origins)

    @property
    def every_key(self) -> tuple[str, ...]:
        """Every key the queue may own, the worker registry included (for deleting it)."""
        return (*self.all, self.workers)
