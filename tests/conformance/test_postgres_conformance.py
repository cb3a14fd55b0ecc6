"""The PostgreSQL backend through the suite's subclass path.

``TASKRUNNER_TEST_POSTGRES_URL`` selects a server (the machine's PostgreSQL in CI's
last run); without it a private throwaway server is started (`local_server`).
"""

from __future__ import annotations

import pytest

from taskrunner_backends.postgres.testing import postgres_harness, postgres_outage_harness
from taskrunner_conformance import Harness, QueueConformance
from taskrunner_conformance.cases.outages import OutageCases

pytestmark = pytest.mark.postgres


class TestPostgresQueue(QueueConformance):
    def make_harness(self) -> Harness:
        return postgres_harness()


class TestPostgresQueueOutages(OutageCases):
    """Restart, crash (``kill -9``) and outage on a private throwaway server."""

    def make_harness(self) -> Harness:
        return postgres_outage_harness()
