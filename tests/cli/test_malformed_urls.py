"""URLs that cannot be read at all: a configuration error naming the problem, masked."""

from __future__ import annotations

import pytest

from taskrunner import ConfigurationError
from taskrunner.backends import check_url
from taskrunner_backends.redis.url import split_url
from tests.cli.conftest import Cli

SECRET = "S3CRET9X"

UNBALANCED_IPV6 = [
    f"redis://:{SECRET}@[::1/0",
    f"redis://:{SECRET}@::1]:6379/0",
    f"rediss://u:{SECRET}@[::1",
    f"redis+cluster://:{SECRET}@[::1:7000",
    f"postgresql://u:{SECRET}@[::1/db",
    f"memory://:{SECRET}@[::1",
]


@pytest.mark.parametrize("url", UNBALANCED_IPV6)
def test_an_unbalanced_ipv6_bracket_is_a_configuration_error(run: Cli, url: str) -> None:
    result = run("inspect", "--queue", "q", "--url", url)

    assert result.code == 2, result.err
    assert "Traceback" not in result.err
    assert result.err.startswith("taskrunner: configuration error: ")
    assert "cannot be parsed" in result.err
    assert "[::1]" in result.err  # how to write it
    assert SECRET not in result.err


@pytest.mark.parametrize("url", UNBALANCED_IPV6)
def test_check_url_refuses_a_url_urllib_cannot_split(url: str) -> None:
    with pytest.raises(ConfigurationError, match="cannot be parsed") as caught:
        check_url(url)

    assert SECRET not in str(caught.value)
    assert caught.value.setting == "url"


def test_the_redis_backend_refuses_it_when_opened_directly() -> None:
    with pytest.raises(ConfigurationError, match="cannot be parsed") as caught:
        split_url(f"redis://:{SECRET}@[::1/0")

    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "written", "meant"),
    [
        (f"redis:/:{SECRET}@host", "'redis:/:***@host' has ':/'", "'redis://:***@host'"),
        (f"redis//u:{SECRET}@h/0", "'redis//u:***@h/0' has '//'", "'redis://u:***@h/0'"),
        ("rediss:host:6380", "'rediss:host:6380' has ':'", "'rediss://host:6380'"),
        (
            f"postgresql:/u:{SECRET}@h/db",
            "'postgresql:/u:***@h/db' has ':/'",
            "'postgresql://u:***@h/db'",
        ),
        (
            f"redis:/h/0?password={SECRET}",
            "'redis:/h/0?password=***' has ':/'",
            "'redis://h/0?password=***'",
        ),
    ],
)
def test_a_mistyped_scheme_separator_says_what_was_meant(
    run: Cli, url: str, written: str, meant: str
) -> None:
    result = run("inspect", "--queue", "q", "--url", url)

    assert result.code == 2, result.err
    assert f"backend URL {written} after its scheme instead of '://'" in result.err
    assert f"expected {meant}" in result.err
    assert SECRET not in result.err


def test_a_url_without_any_scheme_says_so(run: Cli) -> None:
    result = run("inspect", "--queue", "q", "--url", f"u:{SECRET}@host:6379")

    assert result.code == 2, result.err
    assert "backend URL '***@host:6379' has no scheme" in result.err
