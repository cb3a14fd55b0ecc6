"""`SyncProducer` on Redis Cluster, one shard and three: the loop path (no blocking adder)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from taskrunner_backends.redis.testing import cluster_harness
from tests import sync_producer_cases as cases

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


@pytest.fixture(params=["1", "3"], ids=["1-shard", "3-shards"])
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    harness = cluster_harness()
    namespace = f"trcl-{uuid.uuid4().hex[:12]}"
    base = harness.url.split("?", 1)[0]
    yield f"{base}?namespace={namespace}&shards={request.param}"
    asyncio.run(harness.cleanup(namespace))


def test_every_method_and_option(url: str) -> None:
    cases.every_method(url)


def test_many_threads_share_one_instance(url: str) -> None:
    cases.many_threads_share_one_instance(url)


def test_errors_are_typed_and_raised_in_the_calling_thread(url: str) -> None:
    cases.errors_are_typed_and_raised_in_the_calling_thread(url)


def test_works_after_fork(url: str) -> None:
    cases.works_after_fork(url)
