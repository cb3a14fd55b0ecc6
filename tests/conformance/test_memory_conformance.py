"""The in-memory backend through the suite's subclass path, as a third party would run it."""

from __future__ import annotations

import pytest

from taskrunner_conformance import Harness, QueueConformance

from .harnesses import (
    memory_harness,
    memory_max_batch_harness,
    memory_without_heartbeat_harness,
)


class TestInMemoryQueue(QueueConformance):
    def make_harness(self) -> Harness:
        return memory_harness()


class TestInMemoryQueueWithoutHeartbeat(QueueConformance):
    def make_harness(self) -> Harness:
        return memory_without_heartbeat_harness()


class TestInMemoryQueueWithMaxBatch(QueueConformance):
    """A variant claiming and honouring max_batch=5: P5's clamp and X33 apply to it."""

    def make_harness(self) -> Harness:
        return memory_max_batch_harness()

    def test_random_operations_agree_with_the_reference_model(self) -> None:
        # The model-based extra net would double this file's run time; it runs on the
        # two variants above, and the deterministic P5 and X33 check the clamp here.
        pytest.skip("not applicable: P40 runs on the variants without max_batch only")

    # Still the P40 test (the report and the mutation plugin select tests by property).
    test_random_operations_agree_with_the_reference_model.conformance_properties = ("P40",)  # type: ignore[attr-defined]
