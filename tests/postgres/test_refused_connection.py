"""A PostgreSQL that refuses connections is reported at once, in one line."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from taskrunner import cli
from taskrunner.errors import BackendUnavailableError
from taskrunner_backends.postgres import open_from_url

# The default pool_timeout: the pool would have retried for this long.
POOL_TIMEOUT_SECONDS = 5.0


@pytest.fixture
def refused_url() -> str:
    """A URL of a loopback port nobody listens on (bound to find one, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://app:S3CRET9X@127.0.0.1:{port}/db"


async def test_a_refused_connection_fails_at_once_without_pool_warnings(
    refused_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(BackendUnavailableError) as caught:
        await open_from_url(refused_url, queue_name="jobs")
    elapsed = time.monotonic() - started

    assert elapsed < POOL_TIMEOUT_SECONDS / 2, elapsed
    assert "refused" in str(caught.value).lower()
    assert "S3CRET9X" not in str(caught.value)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []


def test_the_cli_says_so_in_one_line(refused_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["inspect", "--queue", "q", "--url", refused_url])

    assert code == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("taskrunner: backend error: cannot connect to PostgreSQL at ")
    assert "Connection refused" in line
