"""The Lua scripts of the backend, loaded once from the package's ``lua/`` files (internal).

Each script runs atomically on the server, which is what makes the fenced operations
safe: the owner and delivery-count check and the action that follows cannot be
interleaved with another client's claim. Scripts declare every key they touch in
KEYS, except the per-key unique locks (``u:<key>``), which they build from the queue's
prefix (passed in ARGV); every key carries the queue's hash tag, so each script stays
within one slot and runs on Redis Cluster too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

__all__ = ["SCRIPTS", "Script"]


@dataclass(frozen=True, slots=True)
class Script:
    """One Lua script and its SHA1 (what EVALSHA takes)."""

    name: str
    source: bytes
    sha: str


# Scripts that make messages wait, admit them, free their slots or cancel waiting ones
# start with the shared flow-control functions of ``lua/flow_lib.lua`` (Lua scripts
# cannot include one another; the text is put in front of theirs here).
_WITH_FLOW = frozenset(
    {"add_requests", "receive", "admit", "fenced", "cancel", "reclaim", "retry_dead"}
)


def _read(name: str) -> bytes:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_bytes()


def _load(name: str) -> Script:
    source = _read(name)
    if name in _WITH_FLOW:
        source = _read("flow_lib") + b"\n" + source
    return Script(name=name, source=source, sha=hashlib.sha1(source).hexdigest())


#: Every script by name: fenced (heartbeat/ack/release/dead-letter), receive (promote
#: due delayed messages, then read new ones), admit (lease ready messages, then admit
#: waiting ones of flow control), reclaim (XPENDING pages from a cursor,
#: each entry judged by its holder's lease), stats, the admin operations, consumer GC,
#: the worker registry, the test hook age_lease, clear (purge and delete_queue), the
#: scheduling and leadership parts (add_requests, cancel, leadership), and the results
#: and lookup parts (results: put and delete; lookup), and the browse part (browse);
#: flow_route: a partitioned queue's record of each flow key's route; unread: a receive's
#: give-back of what it read before it knew priorities were in use.
SCRIPTS: dict[str, Script] = {
    name: _load(name)
    for name in (
        "fenced",
        "receive",
        "admit",
        "reclaim",
        "stats",
        "retry_dead",
        "purge_dead",
        "clear",
        "remove_idle_consumers",
        "workers",
        "age_lease",
        "add_requests",
        "cancel",
        "leadership",
        "results",
        "lookup",
        "browse",
        "flow_route",
        "unread",
    )
}
