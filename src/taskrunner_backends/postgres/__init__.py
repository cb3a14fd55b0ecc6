"""The PostgreSQL backend: ``postgresql://`` (and ``postgres://``) URLs.

`PostgresQueue`, `open_from_url` and `migrate_from_url` (used by ``taskrunner db
migrate``), and the outbox's `relay_from_url` and `writer_from_url` (`outbox`).
Submodules: `queue` (the mechanism, documented there), `schema` (tables and
migrations), `testing` (the conformance harness and test hooks), `transactional` and
`outbox` (dispatch in the caller's transaction); `db`, `errors`, `listener`, `url` and
the optional parts (`scheduling`, `leadership`, `results`, `lookup`) are internal.
"""

from __future__ import annotations

from .outbox import relay_from_url, writer_from_url
from .queue import PostgresQueue, migrate_from_url, open_from_url

__all__ = [
    "PostgresQueue",
    "migrate_from_url",
    "open_from_url",
    "relay_from_url",
    "writer_from_url",
]
