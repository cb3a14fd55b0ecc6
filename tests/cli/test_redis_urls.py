"""Redis URLs: the database number in the path, checked before anything connects."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from redis import Redis
from redis.connection import UnixDomainSocketConnection

from taskrunner import ConfigurationError
from taskrunner_backends.redis.url import split_url
from tests.cli.conftest import Cli

RULE = "the path of a Redis URL is empty or /N, a database number (0, 1, 2, ...)"


@pytest.mark.parametrize(
    "path",
    ["/abc", "/0/1", "/-1", "/1.5", "/+1", "/ 1", "/0x1", "//1", "/1/", "/%31", "/\u0663"],
)
def test_a_path_that_is_not_a_database_number_is_refused(path: str) -> None:
    url = f"redis://:hunter2@host:6379{path}?namespace=x"

    with pytest.raises(ConfigurationError) as caught:
        split_url(url)

    message = str(caught.value)
    assert RULE in message
    assert "redis://:***@host:6379" in message
    assert "hunter2" not in message
    assert caught.value.setting == "url"


@pytest.mark.parametrize(
    ("url", "db"),
    [
        ("redis://host:6379", None),
        ("redis://host:6379/", None),
        ("redis://host:6379/0", "/0"),
        ("rediss://host:6379/15", "/15"),
        ("redis://host/7?namespace=x", "/7"),
        ("redis://host?db=3", None),
    ],
)
def test_a_database_number_or_none_is_accepted(url: str, db: str | None) -> None:
    redis_url, _ = split_url(url)

    assert redis_url.startswith(url.partition("?")[0])
    if db is not None:
        assert redis_url.partition("?")[0].endswith(db)


def test_the_database_given_both_in_the_path_and_the_query_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"database both in the path \(/1\) and as db=2"):
        split_url("redis://host:6379/1?db=2")


def test_a_unix_socket_path_is_a_file_not_a_database() -> None:
    redis_url, _ = split_url("unix:///run/redis/redis.sock?db=3")

    parts = urlsplit(redis_url)
    assert (parts.scheme, parts.path, parts.query) == ("unix", "/run/redis/redis.sock", "db=3")
    # The "//" stays: redis-py 8.2 refuses "unix:/run/..." (what urlunsplit would make).
    assert redis_url == "unix:///run/redis/redis.sock?db=3"
    pool = Redis.from_url(redis_url).connection_pool  # connects only when used
    assert pool.connection_class is UnixDomainSocketConnection
    assert (pool.connection_kwargs["path"], pool.connection_kwargs["db"]) == (
        "/run/redis/redis.sock",
        3,
    )


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/abc", "redis://:hunter2@127.0.0.1:1/0/1"])
def test_the_cli_reports_a_bad_database_path_as_a_configuration_error(run: Cli, url: str) -> None:
    result = run("inspect", "--queue", "q", "--url", url)

    assert result.code == 2, result.err
    assert result.err.startswith("taskrunner: configuration error: ")
    assert RULE in result.err
    assert "hunter2" not in result.err
