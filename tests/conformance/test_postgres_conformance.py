"""The PostgreSQL backend through the suite's subclass path.

``TASKRUNNER_TEST_POSTGRES_URL`` selects a server (the machine's PostgreSQL in CI's
last run); without it a private throwaway server is started (`local_server`).
"""

from __future__ import annotations

import pytest

from taskrunner_backends.postgres.testing import postgres_harness
from taskrunner_conformance import Harness, QueueConformance

pytestmark = pytest.mark.postgres


class TestPostgresQueue(QueueConformance):
    def make_harness(self) -> Harness:
        return postgres_harness()

    @pytest.mark.skip(
        reason="issue 14, open: the state machine runs past the 120 s test timeout on "
        "PostgreSQL (about 0.2 s per example, most of it in each example's teardown); "
        "every fixed property passes"
    )
    def test_random_operations_agree_with_the_reference_model(self) -> None:
        """Skipped here (see the reason); kept in the suite for every other backend."""
