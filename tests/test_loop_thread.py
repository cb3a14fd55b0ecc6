"""`LoopThread`: calls from other threads, their context, errors and interruption."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Iterator

import pytest

from taskrunner.loop_thread import LoopStoppedError, LoopThread

REQUEST = contextvars.ContextVar("REQUEST", default="none")


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    made = LoopThread("test-loop-thread")
    yield made
    made.stop()


def test_a_call_runs_on_the_loop_thread_in_the_callers_context(loop_thread: LoopThread) -> None:
    async def where() -> tuple[str, str]:
        return threading.current_thread().name, REQUEST.get()

    REQUEST.set("request-7")
    assert loop_thread.call(where()) == ("test-loop-thread", "request-7")


def test_the_coroutines_exception_is_raised_in_the_caller(loop_thread: LoopThread) -> None:
    class BoomError(Exception):
        pass

    async def fail() -> None:
        raise BoomError("from the loop")

    with pytest.raises(BoomError, match="from the loop"):
        loop_thread.call(fail())


def test_an_interrupted_caller_cancels_its_coroutine(
    loop_thread: LoopThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()
    cancelled = threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def interrupted(self: object, timeout: float | None = None) -> object:
        started.wait(10)
        raise KeyboardInterrupt  # as Ctrl-C would, while the caller waits

    with monkeypatch.context() as patched:
        patched.setattr(concurrent.futures.Future, "result", interrupted)
        with pytest.raises(KeyboardInterrupt):
            loop_thread.call(forever())
    assert cancelled.wait(10)


def test_a_call_from_the_loops_own_thread_is_refused(loop_thread: LoopThread) -> None:
    async def nested() -> str:
        async def inner() -> None: ...

        try:
            loop_thread.call(inner())
        except RuntimeError as exc:
            return str(exc)
        return "no error"

    assert "deadlock" in loop_thread.call(nested())


def test_stop_cancels_what_runs_and_refuses_later_calls() -> None:
    made = LoopThread("test-loop-thread-stop")
    started = threading.Event()
    outcome: list[BaseException] = []

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    def call() -> None:
        try:
            made.call(forever())
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert started.wait(10)
    made.stop()
    caller.join(10)
    assert not caller.is_alive()
    assert len(outcome) == 1
    assert type(outcome[0]).__name__ == "CancelledError"

    async def nothing() -> None: ...

    with pytest.raises(LoopStoppedError):
        made.call(nothing())
    made.stop()  # idempotent
