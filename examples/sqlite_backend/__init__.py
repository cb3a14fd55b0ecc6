"""A minimal third-party backend: `SqliteQueue`, the `taskrunner.queue.Queue` contract on SQLite.

See docs/writing-a-backend.md. Check it with::

    python -m taskrunner_conformance examples.sqlite_backend.harness:SqliteHarness
"""

from .queue import SqliteQueue

__all__ = ["SqliteQueue"]
