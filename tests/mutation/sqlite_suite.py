"""The conformance suite on the SQLite example, as a pytest module for the mutation run.

The same suite the shipped command runs
(``python -m taskrunner_conformance sqlite_backend.harness:SqliteHarness`` from
examples/), collected by pytest in-process so that mutmut can map tests to the
functions they reach. Not named ``test_*``: the regular test run does not collect it
(CI runs the example through the command line instead).
"""

from __future__ import annotations

from examples.sqlite_backend.harness import SqliteHarness

from taskrunner_conformance import Harness, QueueConformance


class TestSqliteQueue(QueueConformance):
    def make_harness(self) -> Harness:
        return SqliteHarness()
