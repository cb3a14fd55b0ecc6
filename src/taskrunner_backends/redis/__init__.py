"""The Redis Streams backend: `RedisStreamsQueue` and the engine's `open_from_url`.

Submodules: `queue` (the mechanism, documented there), `keys` (key layout),
`testing` (hooks for tests). `errors`, `client`, `scripts` and `url` are internal.
"""

from __future__ import annotations

from .queue import RedisStreamsQueue, open_from_url

__all__ = ["RedisStreamsQueue", "open_from_url"]
