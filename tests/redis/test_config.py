"""URL options, secret redaction, server version checks and key layout (no server needed)."""

from __future__ import annotations

import logging

import pytest
import redis.asyncio as aioredis

from taskrunner.errors import (
    BackendUnavailableError,
    ConfigurationError,
    UnsupportedServerError,
)
from taskrunner.redaction import mask_url
from taskrunner_backends.redis import RedisStreamsQueue, open_from_url
from taskrunner_backends.redis.keys import QueueKeys, namespace_pattern, shard_tag
from taskrunner_backends.redis.queue import check_server
from taskrunner_backends.redis.scripts import SCRIPTS
from taskrunner_backends.redis.url import split_url


def test_split_url_separates_queue_options_from_redis_options() -> None:
    redis_url, options = split_url(
        "redis://u:pw@localhost:6380/2?namespace=app&socket_timeout=3&protocol=3"
    )

    assert options == {"namespace": "app"}
    assert redis_url == "redis://u:pw@localhost:6380/2?socket_timeout=3&protocol=3"


def test_unknown_option_is_a_configuration_error_listing_known_options() -> None:
    with pytest.raises(ConfigurationError) as info:
        split_url("redis://:secret@localhost/0?namesapce=x")

    message = str(info.value)
    assert "namesapce" in message
    assert "namespace" in message
    assert "socket_timeout" in message
    assert "secret" not in message


def test_repeated_option_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="more than once"):
        split_url("redis://localhost/0?namespace=a&namespace=b")


def test_unsupported_scheme_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="scheme"):
        split_url("http://localhost/")


def test_tls_and_unix_urls_are_accepted() -> None:
    assert split_url("rediss://localhost:6380/0?ssl_cert_reqs=none")[1] == {}
    assert split_url("unix:///tmp/redis.sock?db=1&namespace=n")[1] == {"namespace": "n"}


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://user:hunter2@host:6379/0", "redis://user:***@host:6379/0"),
        ("redis://:hunter2@host/0?namespace=x", "redis://:***@host/0?namespace=x"),
        ("rediss://host:6380", "rediss://host:6380"),
        ("redis://user@host", "redis://user@host"),
    ],
)
def test_redis_urls_are_shown_without_their_password(url: str, expected: str) -> None:
    assert mask_url(url) == expected


async def test_queue_repr_and_errors_never_show_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(BackendUnavailableError) as info:
        # Port 1 on loopback: nothing listens, the connection is refused.
        await open_from_url("redis://admin:hunter2@127.0.0.1:1/0", queue_name="q")

    assert "hunter2" not in str(info.value)
    assert "hunter2" not in caplog.text


async def test_injected_client_repr_has_no_password() -> None:
    client = aioredis.Redis(host="127.0.0.1", port=1, password="hunter2")
    queue = RedisStreamsQueue(client, queue_name="q")

    assert "hunter2" not in repr(queue)
    assert "127.0.0.1:1" in repr(queue)
    await client.aclose()


async def test_open_from_url_rejects_unknown_options_before_connecting() -> None:
    with pytest.raises(ConfigurationError):
        await open_from_url("redis://127.0.0.1:1/0?bogus=1", queue_name="q")


def test_constructor_rejects_names_that_break_the_hash_tag() -> None:
    client = aioredis.Redis()
    with pytest.raises(ConfigurationError):
        RedisStreamsQueue(client, queue_name="a}b")
    with pytest.raises(ConfigurationError):
        RedisStreamsQueue(client, queue_name="q", namespace="x*")
    with pytest.raises(TypeError):
        RedisStreamsQueue(object(), queue_name="q")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [".", ".."])
async def test_a_queue_built_directly_refuses_a_path_step_as_its_name(name: str) -> None:
    # Dots are in the key alphabet, so only the shared rule catches these; not only
    # through a URL but whenever a queue's keys are made.
    client = aioredis.Redis()
    with pytest.raises(ConfigurationError, match="are steps of a path"):
        RedisStreamsQueue(client, queue_name=name)
    with pytest.raises(ConfigurationError, match="are steps of a path"):
        QueueKeys(namespace="taskrunner", queue_name=name)
    with pytest.raises(ConfigurationError, match="are steps of a path"):
        shard_tag(name, 0, 3)  # a partitioned queue's shards
    with pytest.raises(ConfigurationError, match="are steps of a path"):
        await open_from_url("redis://127.0.0.1:1/0", queue_name=name)
    RedisStreamsQueue(client, queue_name="v1.2")  # other names with dots are fine
    assert QueueKeys(namespace="taskrunner", queue_name="v1.2").stream == "taskrunner:{v1.2}:stream"
    await client.aclose()


@pytest.mark.parametrize(
    "info",
    [
        {"redis_version": "6.2.14"},
        {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "7.0.0"},
        {"redis_version": "5.0.7"},
        {},
    ],
)
def test_old_or_unknown_servers_are_rejected(info: dict[str, str]) -> None:
    with pytest.raises(UnsupportedServerError, match=">="):
        check_server(info)


@pytest.mark.parametrize(
    ("info", "name", "version"),
    [
        ({"redis_version": "7.0.15"}, "redis", (7, 0, 15)),
        ({"redis_version": "8.2.1"}, "redis", (8, 2, 1)),
        (
            {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "9.1.2"},
            "valkey",
            (9, 1, 2),
        ),
        (
            {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "7.2.5"},
            "valkey",
            (7, 2, 5),
        ),
    ],
)
def test_supported_servers_are_identified(
    info: dict[str, str], name: str, version: tuple[int, ...]
) -> None:
    found = check_server(info)

    assert (found.name, found.version) == (name, version)


def test_every_key_of_a_queue_shares_one_hash_tag() -> None:
    keys = QueueKeys(namespace="app", queue_name="emails")

    assert keys.all == (
        "app:{emails}:stream",
        "app:{emails}:dead",
        "app:{emails}:delayed",
        "app:{emails}:parked",
        "app:{emails}:origins",
    )
    assert namespace_pattern("app") == "app:*"


def test_every_script_is_loaded_from_package_data() -> None:
    assert all(script.source.strip() and len(script.sha) == 40 for script in SCRIPTS.values())


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "redis://h/0?ssl_certfile=/x",
            "ssl_certfile in redis://h/0?ssl_certfile=/x need a rediss",
        ),
        (
            "redis://h/0?protocol=9",
            "option protocol='9' in redis://h/0?protocol=9 must be one of 2, 3",
        ),
        (
            "redis://h/0?socket_timeout=-1",
            "socket_timeout='-1' in redis://h/0?socket_timeout=-1 must be a positive",
        ),
        ("redis://h/0?socket_timeout=abc", "must be a positive number of seconds"),
        ("redis://h/0?max_connections=x", "option max_connections='x'"),
        ("redis://h/0?retry_on_timeout=maybe", "must be true or false"),
        ("rediss://h/0?ssl_cert_reqs=sometimes", "must be one of none, optional, required"),
    ],
)
def test_bad_option_values_are_configuration_errors_naming_the_option(
    url: str, message: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        split_url(url)

    assert message in str(caught.value)
