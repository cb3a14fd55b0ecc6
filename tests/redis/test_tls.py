"""TLS URLs verify the server's certificate and host name unless the URL says otherwise."""

from __future__ import annotations

import ssl
from typing import Any

import redis.asyncio as aioredis

from taskrunner_backends.redis.url import split_url


def _tls_settings(url: str) -> Any:
    """The TLS settings a connection made from `url` would use (no connection is made)."""
    redis_url, _ = split_url(url)
    client = aioredis.Redis.from_url(redis_url)
    return client.connection_pool.make_connection().ssl_context  # type: ignore[no-untyped-call]


def test_rediss_checks_the_host_name_and_certificate_by_default() -> None:
    # redis-py < 6 did not check host names by default; pyproject requires >= 6.
    settings = _tls_settings("rediss://cache.example.com:6380/0?namespace=app")

    assert settings.check_hostname is True
    assert settings.cert_reqs == ssl.CERT_REQUIRED


def test_a_url_can_turn_the_host_name_check_off_explicitly() -> None:
    settings = _tls_settings("rediss://10.0.0.5:6380/0?ssl_check_hostname=false")

    assert settings.check_hostname is False
