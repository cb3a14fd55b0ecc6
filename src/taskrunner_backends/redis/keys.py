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
    {namespace}:{{{queue}}}:bell      the doorbell: one entry wakes one blocked receive when
                                       a delayed message is due earlier than any before it
    {namespace}:{{{queue}}}:moved     messages whose entry id is not their message id
                                       (hash: message id -> "s<stream id>" | "p<parked id>")
    {namespace}:{{{queue}}}:uniques   the unique keys held (zset: key -> expiry ms or +inf)
    {namespace}:{{{queue}}}:u:<key>   one held unique key (string: the holder's message id)
    {namespace}:{{{queue}}}:leaders   leader leases (hash: election -> "token|expiry ms|holder")
    {namespace}:{{{queue}}}:fired     fire records (hash: schedule -> "instant message id")
    {namespace}:{{{queue}}}:dead_ids  dead letters by original message id
                                       (hash: message id -> dead-letter entry id)
    {namespace}:{{{queue}}}:results   the stored results (zset: message id -> expiry ms)
    {namespace}:{{{queue}}}:r:<id>    one task result (string: its body, with PX)
    {namespace}:{{{queue}}}:done      result notifications (a stream capped with
                                       MAXLEN ~; one entry per put, naming the ids)
    {namespace}:{{{queue}}}:stream:<p> the ready and in-flight messages of priority p
                                       (1-9; priority 0 is ``stream`` itself), each
                                       entry with fields i (message id), n and p
    {namespace}:{{{queue}}}:levels    the priorities above 0 that have a stream (hash:
                                       "1".."9" -> 1; absent on a queue that never
                                       used one)

Flow control (`taskrunner.queue_flow`) keeps its state under ``{namespace}:{{{queue}}}:f:``
(`QueueKeys.flow_prefix`)::

    f:seq        the one counter of the queue's flow order: each wait and each admission
                 takes the next number (hash: n -> the last number taken)
    f:waiting    every waiting message (zset: parked id -> its wait's number)
    f:q:<key>    the waiting messages of flow key <key>, in add order (zset: parked id
                 -> its wait's number)
    f:ring       the keys that may admit (zset: flow key -> turn)
    f:slot       the keys whose head waits for a concurrency slot (zset: key -> turn)
    f:rate       the keys whose head waits for its rate key (zset: key -> the server
                 ms at which GCRA next allows it)
    f:turn       each key's turn: the number of its last admission, or of its first
                 wait if it never had one (hash: key -> number; kept until purge)
    f:h:<key>    the admitted messages of <key> not yet at a final outcome nor released:
                 the holders of its slots (hash: message id -> 1; HLEN is the count)
    f:tat        each rate key's theoretical arrival time (zset: rate key -> server ms;
                 an entry in the past is the same as none and is pruned)
    f:adm        the admitted messages holding a slot (hash: message id -> flow key)
    f:route      on a partitioned queue, the key that routes each flow key's messages
                 (hash: flow key -> its rate key, or itself), kept on the flow key's
                 own shard (see `partitioned_delivery`)

A waiting message's body is a parked-stream entry, as a delayed message's is (``moved``
maps its id to it), so its id stays the one `add_requests` returned through admission.
A key with waiting messages is in exactly one of ring, slot and rate.

Unique keys are named by their caller's text after ``u:``, results by their message
id after ``r:``. The hash tag is the first brace pair of a key, which is always the
queue's, so whatever text follows (braces included) stays in the queue's slot.
Unique keys they are indexed in
``uniques`` so purge and delete_queue find them without SCAN or KEYS. Scripts that free
one (ack, dead-letter, cancel, purge) build its name from the prefix: an undeclared key,
but in the queue's own slot, which Redis Cluster allows. Results are indexed in
``results`` for the same reason (delete_queue deletes them).

The consumer group on the stream is always `GROUP`. Everything a namespace owns
matches `QueueKeys.namespace_pattern`, which is how tests clean up after themselves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from redis.crc import key_slot as _crc_slot

from taskrunner.errors import ConfigurationError
from taskrunner.names import check_queue_name

__all__ = ["GROUP", "SLOTS", "QueueKeys", "key_slot", "namespace_pattern", "shard_tag"]

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


def _check_queue_name(value: str) -> str:
    # The alphabet allows dots; '.' and '..' are refused as on every backend.
    return check_queue_name(_check_name(value, "queue_name"))


# A shard's hash tag: the queue name, '#', the shard number and a salt that places its
# slot (see `shard_tag`). '#' is not allowed in names, so no plain queue shares it.
_SHARD_TAG = re.compile(r"[A-Za-z0-9_.:\-/@+=]+#[0-9]+\.[0-9]+")

# Redis Cluster's slot count.
SLOTS = 16384


def key_slot(key: str) -> int:
    """The Redis Cluster hash slot of `key` (redis-py's CRC16 of its hash tag)."""
    return int(_crc_slot(key.encode()))


def shard_tag(queue_name: str, shard: int, shards: int) -> str:
    """The hash tag of shard `shard` of `shards`: ``<queue>#<shard>.<salt>``.

    The salt is the smallest number that puts the tag's slot in the shard's own
    1/`shards` of the slot range. ``redis-cli --cluster create`` (and most operators)
    give each master one contiguous range, so K shards on K masters land one per
    master instead of wherever CRC16 happens to send them (three tags on three masters
    share a master 7 times in 9 by chance). Deterministic: every client computes the
    same tags.
    """
    _check_queue_name(queue_name)
    low = shard * SLOTS // shards
    high = (shard + 1) * SLOTS // shards
    salt = 0
    while True:
        tag = f"{queue_name}#{shard}.{salt}"
        if low <= key_slot("{" + tag + "}") < high:
            return tag
        salt += 1


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
    #: The hash tag of one shard of a partitioned queue (see `shard_tag`); empty for a
    #: plain queue, whose tag is its name.
    shard: str = ""

    def __post_init__(self) -> None:
        _check_name(self.namespace, "namespace")
        _check_queue_name(self.queue_name)
        if self.shard and not _SHARD_TAG.fullmatch(self.shard):
            raise ValueError(f"not a shard tag: {self.shard!r}")

    @property
    def _prefix(self) -> str:
        return f"{self.namespace}:{{{self.shard or self.queue_name}}}"

    @property
    def stream(self) -> str:
        """The stream holding ready and in-flight messages."""
        return f"{self._prefix}:stream"

    def level_stream(self, level: int) -> str:
        """The stream of priority `level`: `stream` for 0, ``stream:<level>`` above."""
        return self.stream if level == 0 else f"{self._prefix}:stream:{level}"

    @property
    def levels(self) -> str:
        """The hash of priorities above 0 that have a stream (scripts derive it from `stream`)."""
        return f"{self._prefix}:levels"

    def level_scheduling(self, level: int) -> tuple[str, ...]:
        """`scheduling` with the stream of `level` first: the KEYS of per-level scripts."""
        keys = self.scheduling
        return keys if level == 0 else (self.level_stream(level), *keys[1:])

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
    def bell(self) -> str:
        """The doorbell stream, read with the queue stream by every blocking receive."""
        return f"{self._prefix}:bell"

    @property
    def moved(self) -> str:
        """The forward map of moved messages (message id -> current stream or parked id).

        Only messages whose current entry id differs from their message id have a
        field: released ones and delayed adds. `cancel` finds them through it.
        """
        return f"{self._prefix}:moved"

    @property
    def uniques(self) -> str:
        """The index of held unique keys (zset: key -> expiry in server ms, +inf: none)."""
        return f"{self._prefix}:uniques"

    @property
    def unique_prefix(self) -> str:
        """The prefix of each unique key's own key (``<prefix><key>``)."""
        return f"{self._prefix}:u:"

    @property
    def relay_prefix(self) -> str:
        """The prefix of each outbox row's relay record (``<prefix><row id>``)."""
        return f"{self._prefix}:o:"

    @property
    def flow_prefix(self) -> str:
        """The prefix of every flow-control key (``<prefix>seq``, ``<prefix>q:<key>``...)."""
        return f"{self._prefix}:f:"

    def flow_queue(self, key: str) -> str:
        """The zset of flow key `key`'s waiting messages (parked id -> wait number)."""
        return f"{self.flow_prefix}q:{key}"

    def unique(self, key: str) -> str:
        """The key holding unique key `key` (its value: the holder's message id)."""
        return f"{self.unique_prefix}{key}"

    @property
    def leaders(self) -> str:
        """The hash of leader leases (election -> ``token|expiry ms|holder``)."""
        return f"{self._prefix}:leaders"

    @property
    def fired(self) -> str:
        """The hash of fire records (schedule -> ``instant message-id``)."""
        return f"{self._prefix}:fired"

    @property
    def dead_ids(self) -> str:
        """The hash of dead letters by original message id (message id -> dead entry id).

        Written by every script that dead-letters (one HSET), cleared by retry and
        purge of dead letters; `lookup` finds a dead message by the id it had.
        """
        return f"{self._prefix}:dead_ids"

    @property
    def results(self) -> str:
        """The index of stored results (zset: message id -> expiry in server ms)."""
        return f"{self._prefix}:results"

    @property
    def result_prefix(self) -> str:
        """The prefix of each result's own key (``<prefix><message id>``)."""
        return f"{self._prefix}:r:"

    def result(self, message_id: str) -> str:
        """The key holding the result of `message_id` (its value: the body)."""
        return f"{self.result_prefix}{message_id}"

    @property
    def done(self) -> str:
        """The result notification stream: each put appends the ids it stored."""
        return f"{self._prefix}:done"

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
    def scheduling(self) -> tuple[str, ...]:
        """`all` followed by bell, moved, uniques and dead_ids: the KEYS of scripts using them."""
        return (*self.all, self.bell, self.moved, self.uniques, self.dead_ids)

    @property
    def every_key(self) -> tuple[str, ...]:
        """Every fixed key the queue may own, the worker registry included (for deleting it).

        Held unique keys (`unique`) and results (`result`) are not fixed; `uniques` and
        `results` list them. The order is what ``lua/clear.lua`` expects:
        ``uniques`` is KEYS[8], ``results`` KEYS[13].
        """
        return (
            *self.scheduling,
            self.workers,
            self.leaders,
            self.fired,
            self.results,
            self.done,
        )
