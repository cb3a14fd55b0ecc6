"""`SyncProducer` on PostgreSQL (the loop path: psycopg's async pool on its thread)."""

from __future__ import annotations

import socket

import pytest

from taskrunner import BackendUnavailableError, SyncProducer
from tests import sync_producer_cases as cases

from .support import Migrated


@pytest.fixture
def url(schema: Migrated) -> str:
    joiner = "&" if "?" in schema.url else "?"
    return f"{schema.url}{joiner}schema={schema.name}"


def test_every_method_and_option(url: str) -> None:
    cases.every_method(url)


def test_result_times_out(url: str) -> None:
    cases.result_times_out(url)


def test_errors_are_typed_and_raised_in_the_calling_thread(url: str) -> None:
    cases.errors_are_typed_and_raised_in_the_calling_thread(url)


def test_many_threads_share_one_instance(url: str) -> None:
    cases.many_threads_share_one_instance(url)


def test_closed_means_closed(url: str) -> None:
    cases.closed_means_closed(url)


def test_works_after_fork(url: str) -> None:
    cases.works_after_fork(url)


def test_nothing_listening_is_backend_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://postgres@127.0.0.1:{port}/test?pool_timeout=1"
    with SyncProducer(url, cases.app) as producer, pytest.raises(BackendUnavailableError):
        producer.dispatch(cases.tick)
