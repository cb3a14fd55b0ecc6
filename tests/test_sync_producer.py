"""`SyncProducer` on the memory backend: every method, threads, fork, errors, close."""

from __future__ import annotations

import inspect
import uuid

import pytest

from taskrunner import ConfigurationError, Producer, QueueClosedError, SyncProducer

from . import sync_producer_cases as cases


@pytest.fixture
def url() -> str:
    """A ``memory://`` store of this test's own (named stores live as long as the process)."""
    return f"memory://sync-{uuid.uuid4().hex[:12]}"


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


def test_close_cancels_a_call_in_flight(url: str) -> None:
    cases.close_cancels_a_call_in_flight(url)


def test_works_after_fork(url: str) -> None:
    cases.works_after_fork(url, shared_store=False)


def test_a_closed_instance_never_made_a_thread() -> None:
    producer = SyncProducer("memory://never-used", cases.app)
    producer.close()
    with pytest.raises(QueueClosedError):
        producer.dispatch(cases.tick)


def test_the_url_scheme_and_queue_name_are_checked_at_once() -> None:
    with pytest.raises(ConfigurationError):
        SyncProducer("nosuch://x", cases.app)
    with pytest.raises(ConfigurationError):
        SyncProducer("memory://", cases.app, queue_name="")


def test_dispatch_takes_every_option_the_async_producer_takes() -> None:
    for name in ("dispatch", "dispatch_many", "result", "status", "status_many", "cancel"):
        sync = inspect.signature(getattr(SyncProducer, name)).parameters
        async_ = inspect.signature(getattr(Producer, name)).parameters
        assert list(sync) == list(async_), name
        for parameter, expected in async_.items():
            assert sync[parameter].kind == expected.kind, (name, parameter)
            assert sync[parameter].default == expected.default, (name, parameter)
