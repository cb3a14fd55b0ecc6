"""The conformance suite on `PartitionedQueue` over a real Redis Cluster (3 shards).

``TASKRUNNER_TEST_CLUSTER_URL`` selects a cluster; without it the shipped harness starts
a private one of 3 masters and 3 replicas on loopback ports (server kind as
``TASKRUNNER_TEST_SERVER`` says) and stops it at exit.
"""

from __future__ import annotations

import pytest

from taskrunner_backends.redis.testing import cluster_harness
from taskrunner_conformance import Harness, QueueConformance

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


class TestPartitionedQueue(QueueConformance):
    def make_harness(self) -> Harness:
        return cluster_harness()
