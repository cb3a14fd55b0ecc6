"""The command line on a Redis Cluster URL: enqueue with a partition key, inspect.

Each command opens its own handle, whose round robin starts at a random shard, so only
the partition key makes the shard predictable.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from taskrunner_backends.redis.testing import cluster_harness

from .conftest import Cli

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

APP = "tests.cli.apps:app"


@pytest.fixture
def cluster_url() -> Iterator[str]:
    harness = cluster_harness()
    namespace = f"trcli-{uuid.uuid4().hex[:12]}"
    base = harness.url.split("?", 1)[0]
    yield f"{base}?shards=3&namespace={namespace}"
    asyncio.run(harness.cleanup(namespace))


def test_enqueue_with_a_partition_key_keeps_every_message_on_one_shard(
    run: Cli, cluster_url: str
) -> None:
    ids = []
    for name in ("a", "b", "c", "d", "e", "f"):
        result = run(
            "enqueue",
            APP,
            "cli.greet",
            "--payload",
            f'{{"name": "{name}"}}',
            "--partition-key",
            "customer-9",
            "--url",
            cluster_url,
        )
        assert result.code == 0, result.err
        ids.append(result.out.strip())
    assert len({i.split("@")[0] for i in ids}) == 1, ids
    shown = run("inspect", "--app", APP, "--url", cluster_url, "--json")
    assert shown.code == 0, shown.err
    [queue] = shown.json()["queues"]
    assert (queue["ready"], queue["in_flight"]) == (6, 0)
    assert "namespace=" in queue["url"]
