"""The in-memory backend through the suite's subclass path, as a third party would run it."""

from __future__ import annotations

from taskrunner_conformance import Harness, QueueConformance

from .harnesses import memory_harness, memory_without_heartbeat_harness


class TestInMemoryQueue(QueueConformance):
    def make_harness(self) -> Harness:
        return memory_harness()


class TestInMemoryQueueWithoutHeartbeat(QueueConformance):
    def make_harness(self) -> Harness:
        return memory_without_heartbeat_harness()
