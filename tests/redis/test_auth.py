"""A server that needs a password, reached without one or with a wrong one.

The error must say which it is, naming the server by its URL with the password
masked: the server's own reply (about HELLO, or an "invalid username-password pair")
leaves a user guessing whether the URL lacks a password or has the wrong one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from taskrunner.errors import BackendError
from taskrunner.redaction import mask_url
from taskrunner_backends.redis import open_from_url
from tests.servers import RedisServer

pytestmark = pytest.mark.redis

_PASSWORD = "auth-test-password"


@pytest.fixture
def port(redis_server_factory: Callable[..., RedisServer]) -> int:
    """A throwaway server that needs `_PASSWORD` (stopped by pid by the factory)."""
    server = redis_server_factory()

    # CONFIG SET rather than --requirepass: RedisServer.start waits for a PING that a
    # server needing a password would refuse.
    async def protect() -> None:
        client = aioredis.Redis.from_url(server.url)
        try:
            await client.config_set("requirepass", _PASSWORD)
        finally:
            await client.aclose()

    asyncio.run(protect())
    return server.port


async def refusal(url: str) -> str:
    with pytest.raises(BackendError) as caught:
        await open_from_url(url, queue_name="auth")
    return str(caught.value)


async def test_a_url_without_a_password_is_told_the_server_needs_one(port: int) -> None:
    url = f"redis://127.0.0.1:{port}/0"

    message = await refusal(url)

    assert f"{url} needs a password" in message
    assert "HELLO" not in message


async def test_a_wrong_password_is_said_to_be_refused_and_never_shown(port: int) -> None:
    url = f"redis://:wrong-{_PASSWORD}@127.0.0.1:{port}/0"

    message = await refusal(url)

    assert f"{mask_url(url)} refused the password" in message
    assert "wrong-" not in message
    assert "invalid username-password pair" not in message


async def test_an_unknown_user_is_named_with_the_refusal(port: int) -> None:
    url = f"redis://someone:{_PASSWORD}@127.0.0.1:{port}/0"

    message = await refusal(url)

    assert f"{mask_url(url)} refused the password of user 'someone'" in message
    assert _PASSWORD not in message


async def test_the_right_password_opens_the_queue(port: int) -> None:
    queue = await open_from_url(f"redis://:{_PASSWORD}@127.0.0.1:{port}/0", queue_name="auth")
    try:
        assert await queue.add([b"x"])
    finally:
        await queue.delete_queue()
        await queue.aclose()
