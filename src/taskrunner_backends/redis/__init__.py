"""The Redis Streams backend, on one server or partitioned over a Redis Cluster.

`RedisStreamsQueue` and `open_from_url` (redis://, rediss://, unix://);
`PartitionedQueue` and `open_cluster_from_url` (redis+cluster://, rediss+cluster://).

Submodules: `queue` (the single-server queue, composed of parts whose modules
document the mechanism: `receiving`, `fencing`, `adding`, `leadership`, `results`,
`lookup`, `browse`, `admin`, `workers`), `keys` (key layout), `testing` (hooks for
tests). The other modules are internal.
"""

from __future__ import annotations

from .partitioned import PartitionedQueue, open_cluster_from_url
from .queue import RedisStreamsQueue, open_from_url

__all__ = ["PartitionedQueue", "RedisStreamsQueue", "open_cluster_from_url", "open_from_url"]
