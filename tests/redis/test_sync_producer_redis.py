"""`SyncProducer` on a real Redis: every method, threads, fork (own sockets), errors."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redis

from taskrunner import BackendUnavailableError, SyncProducer, TaskState
from taskrunner.loop_thread import LoopThread
from tests import sync_producer_cases as cases
from tests.servers import RedisServer

pytestmark = pytest.mark.redis


@pytest.fixture
def url(redis_url: str, redis_namespace: str) -> str:
    return f"{redis_url}?namespace={redis_namespace}&client_name={redis_namespace}"


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


def _connections(redis_url: str, name: str) -> dict[int, dict[str, str]]:
    """CLIENT LIST entries named `name` (the producer's connections), by client id."""
    with redis.Redis.from_url(redis_url) as client:
        entries = client.client_list()
    return {int(e["id"]): e for e in entries if e.get("name") == name}


def test_works_after_fork(url: str) -> None:
    cases.works_after_fork(url)


def test_the_forked_child_uses_connections_of_its_own_and_leaves_the_parents(
    url: str, redis_url: str, redis_namespace: str
) -> None:
    with SyncProducer(url, cases.app) as producer:
        producer.dispatch(cases.tick)  # opens the async pool (through the loop)
        producer.dispatch(cases.tick)  # and the blocking one (from this thread)
        producer.dispatch(cases.tick, delay=0)  # the async connection's last command: XADD
        parents = _connections(redis_url, redis_namespace)
        assert len(parents) >= 2
        assert {entry["cmd"] for entry in parents.values()} == {"xadd"}
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report through the pipe, never return into pytest
            code = 1
            try:
                os.close(read_end)
                producer.dispatch(cases.tick)  # opens the child's own (through its loop)
                producer.dispatch(cases.tick)  # blocking path
                producer.cancel("1-0")  # loop path: a script, which no parent connection ran
                mine = _connections(redis_url, redis_namespace)
                new = sorted(set(mine) - set(parents))
                os.write(write_end, " ".join(f"{i}:{mine[i]['cmd']}" for i in new).encode())
                producer.close()
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            report = pipe.read().decode()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, report
        # The child opened its own connections (async pool and blocking pool), and ran
        # its script on one of them.
        child = dict(item.split(":") for item in report.split())
        assert len(child) >= 2, report
        assert sorted(child.values()) == ["evalsha", "xadd"], report
        after = _connections(redis_url, redis_namespace)
        # Every connection of the parent is still up, unused by the child (its last
        # command is still the parent's XADD): the child neither wrote on it nor
        # closed it. The child's own went away with it.
        assert set(after) == set(parents)
        assert {entry["cmd"] for entry in after.values()} == {"xadd"}
        producer.dispatch(cases.tick)
        producer.status("1-0")
        assert set(_connections(redis_url, redis_namespace)) == set(parents)


def test_an_unreachable_server_is_backend_unavailable(
    redis_server_factory: Callable[..., RedisServer],
) -> None:
    server = redis_server_factory()
    with SyncProducer(f"{server.url}?namespace=sync&socket_connect_timeout=1", cases.app) as p:
        p.dispatch(cases.tick)
        p.dispatch(cases.tick)  # the blocking path is open too
        server.stop()
        with pytest.raises(BackendUnavailableError):
            p.dispatch(cases.tick)  # blocking path
        with pytest.raises(BackendUnavailableError):
            p.dispatch(cases.tick, delay=1)  # loop path
        with pytest.raises(BackendUnavailableError):
            p.status("1-0")
        server.start()
        assert p.dispatch(cases.tick)
        assert p.dispatch(cases.tick, delay=1)


def test_nothing_listening_fails_the_first_call_and_the_next_tries_again() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with SyncProducer(f"redis://127.0.0.1:{port}?socket_connect_timeout=1", cases.app) as p:
        for _ in range(2):
            with pytest.raises(BackendUnavailableError):
                p.dispatch(cases.tick)


def test_plain_dispatches_skip_the_loop_thread_and_the_rest_take_it(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hops: list[str] = []
    real_call = LoopThread.call

    def counting_call(self: LoopThread, coro: Coroutine[Any, Any, Any]) -> Any:
        hops.append(threading.current_thread().name)
        return real_call(self, coro)

    monkeypatch.setattr(LoopThread, "call", counting_call)
    with SyncProducer(url, cases.app) as producer:
        producer.dispatch(cases.tick)  # the first call opens the queue, on the loop
        assert len(hops) == 1
        plain: list[str] = [producer.dispatch(cases.double, n) for n in range(5)]
        plain += producer.dispatch_many(cases.double, [5, 6])
        assert len(hops) == 1  # sent from this thread
        producer.dispatch(cases.double, 7, delay=0)
        producer.dispatch(cases.double, 8, unique_key="k")
        producer.dispatch(cases.double, 9, partition_key="p")
        assert len(hops) == 4
        # What the blocking path added is what the async queue reads back.
        assert [s.state for s in producer.status_many(plain)] == [TaskState.READY] * 7
    cases.RAN.clear()
    cases.run_worker(url)
    assert sorted(cases.RAN) == list(range(10))
