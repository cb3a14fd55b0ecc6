"""The Redis Streams backend, on one server or partitioned over a Redis Cluster.

`RedisStreamsQueue` and `open_from_url` (redis://, rediss://, unix://);
`PartitionedQueue` and `open_cluster_from_url` (redis+cluster://, rediss+cluster://).

Submodules: `queue` (the mechanism, documented there), `keys` (key layout),
`testing` (hooks for tests). `errors`, `client`, `scripts` and `url` are internal.
"""

from __future__ import annotations

from .partitioned import PartitionedQueue, open_cluster_from_url
from .queue import RedisStreamsQueue, open_from_url

__all__ = ["PartitionedQueue", "RedisStreamsQueue", "open_cluster_from_url", "open_from_url"]
