"""`parse_url`: our options apart from libpq's, each bad value named, passwords never shown.

No server needed: parsing never connects.
"""

from __future__ import annotations

from urllib.parse import unquote

import pytest
from psycopg.conninfo import conninfo_to_dict

from taskrunner.errors import ConfigurationError
from taskrunner_backends.postgres.url import parse_url

SECRET = "s3cr%40t"  # percent-encoded "s3cr@t"
BASE = f"postgresql://alice:{SECRET}@db.example:5433/app"


def _error(url: str) -> str:
    with pytest.raises(ConfigurationError) as info:
        parse_url(url)
    assert info.value.setting == "url"
    message = str(info.value)
    assert "s3cr" not in message, message
    return message


def test_defaults() -> None:
    parsed = parse_url(BASE)
    assert parsed.conninfo == BASE
    assert parsed.schema == "taskrunner"
    assert (parsed.pool_min, parsed.pool_max, parsed.pool_timeout) == (1, 10, 5.0)
    assert parsed.migrate == "auto"
    assert "s3cr" not in parsed.display
    assert parsed.display == "postgresql://alice:***@db.example:5433/app"
    assert "s3cr@t" in parsed.secrets
    assert SECRET in parsed.secrets


def test_our_options_are_read_and_removed_from_the_conninfo() -> None:
    parsed = parse_url(
        BASE + "?schema=jobs_1&pool_min=2&pool_max=3&pool_timeout=0.5&migrate=never"
        "&sslmode=require&application_name=worker"
    )
    assert parsed.schema == "jobs_1"
    assert (parsed.pool_min, parsed.pool_max, parsed.pool_timeout) == (2, 3, 0.5)
    assert parsed.migrate == "never"
    assert parsed.conninfo == BASE + "?sslmode=require&application_name=worker"


def test_postgres_scheme_is_accepted_and_normalised() -> None:
    parsed = parse_url("postgres://h/db?schema=x")
    assert parsed.conninfo == "postgresql://h/db"
    assert parsed.schema == "x"


def test_libpq_values_pass_through_as_written() -> None:
    # libpq percent-decodes itself and keeps "+": re-encoding would alter these.
    url = "postgresql://h/db?options=-c%20statement_timeout%3D5s&sslrootcert=/a+b/ca.pem"
    assert parse_url(url).conninfo == url


@pytest.mark.parametrize(
    "option",
    [
        "sslmode=verify-full",
        "sslrootcert=/etc/ca.pem",
        "sslcert=/c",
        "sslkey=/k",
        "connect_timeout=3",
        "application_name=a",
        "options=-c%20x%3Dy",
        "target_session_attrs=read-write",
        "keepalives=1",
        "keepalives_idle=10",
        "keepalives_interval=5",
        "keepalives_count=3",
        "passfile=/p",
        "service=svc",
        "host=/var/run/postgresql",
    ],
)
def test_common_libpq_options_are_accepted(option: str) -> None:
    conninfo = parse_url(f"postgresql:///db?{option}").conninfo

    # libpq's own parser reads it: a URI with no host keeps its "//" (urlunsplit drops it,
    # and "postgresql:/db?..." is no connection string at all).
    assert conninfo == f"postgresql:///db?{option}"
    name, _, value = option.partition("=")
    assert conninfo_to_dict(conninfo) == {"dbname": "db", name: unquote(value)}


def test_unknown_option_is_named_with_the_known_ones() -> None:
    message = _error(BASE + "?shema=x")
    assert "'shema'" in message
    for known in ("schema", "pool_max", "migrate", "sslmode", "connect_timeout"):
        assert known in message


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("pool_min=0", "pool_min"),
        ("pool_min=-1", "pool_min"),
        ("pool_min=1.5", "pool_min"),
        ("pool_min=", "pool_min"),
        ("pool_max=x", "pool_max"),
        ("pool_max=0", "pool_max"),
        ("pool_min=5&pool_max=4", "pool_max"),
        ("pool_timeout=0", "pool_timeout"),
        ("pool_timeout=-1", "pool_timeout"),
        ("pool_timeout=nan", "pool_timeout"),
        ("pool_timeout=inf", "pool_timeout"),
        ("pool_timeout=soon", "pool_timeout"),
        ("migrate=sometimes", "migrate"),
        ("schema=Bad-Name", "schema"),
        ("schema=", "schema"),
        ("schema=1abc", "schema"),
        ("schema=a&schema=b", "schema"),
        ("sslmode=require&sslmode=disable", "sslmode"),
        ("novalue", "novalue"),
    ],
)
def test_bad_values_name_the_option(query: str, named: str) -> None:
    assert named in _error(f"{BASE}?{query}")


@pytest.mark.parametrize("url", ["redis://h/0", "mysql://h/db", "h/db", ""])
def test_other_schemes_are_refused(url: str) -> None:
    assert "postgresql://" in _error(url)


def test_not_a_string_is_refused() -> None:
    with pytest.raises(ConfigurationError):
        parse_url(b"postgresql://h/db")  # type: ignore[arg-type]


def test_a_password_in_the_query_is_masked_too() -> None:
    parsed = parse_url("postgresql://bob@h/db?password=s3cr%40t&sslpassword=s3crkey")
    assert "s3cr" not in parsed.display
    assert {"s3cr%40t", "s3cr@t", "s3crkey"} <= set(parsed.secrets)
    # ...and in errors about other options of the same URL.
    _error("postgresql://bob@h/db?password=s3cr%40t&pool_max=zero")


def test_a_password_with_unencoded_delimiters_is_masked_in_errors() -> None:
    _error("postgresql://alice:s3cr/t?x@h/db?pool_min=0")
