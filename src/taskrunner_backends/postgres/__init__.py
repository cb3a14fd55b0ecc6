"""The PostgreSQL backend: ``postgresql://`` (and ``postgres://``) URLs.

`PostgresQueue`, `open_from_url` and `migrate_from_url` (used by ``taskrunner db
migrate``). Submodules: `queue` (the mechanism, documented there), `schema` (tables and
migrations), `testing` (the conformance harness and test hooks); `db`, `errors`,
`listener`, `url` and the optional parts (`scheduling`, `leadership`, `results`,
`lookup`) are internal.
"""

from __future__ import annotations

from .queue import PostgresQueue, migrate_from_url, open_from_url

__all__ = ["PostgresQueue", "migrate_from_url", "open_from_url"]
