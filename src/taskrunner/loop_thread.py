"""An asyncio event loop on a background thread, for calling async code from plain `def`s.

`LoopThread` runs one loop on one daemon thread; `LoopThread.call` runs a coroutine
there and blocks the calling thread until it finishes, returning its value or raising
its exception in the calling thread. Any number of threads may call at once: their
coroutines interleave on the one loop, so they share whatever connections live there.

Fork: a loop (and the sockets of connections living on it) copied into a child by
``os.fork()`` still belongs to the parent. The child must neither run it nor close it:
closing the loop unregisters its file descriptors from an epoll instance the parent
shares, and closing a connection can send bytes (a TLS ``close_notify``, a protocol
goodbye) on a socket the parent is still using. `LoopThread.orphan` therefore keeps such
a copy referenced for the life of the child and points its file descriptors (the
selector's and every one registered in it) at private stand-ins, so nothing the copy
ever does, even at interpreter exit, reaches the parent's sockets.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import select
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopStoppedError", "LoopThread"]

T = TypeVar("T")

# Copies inherited through fork, kept alive so their finalizers never run in the child.
_ORPHANS: list[object] = []


class LoopStoppedError(RuntimeError):
    """`LoopThread.call` after `LoopThread.stop`."""


class LoopThread:
    """One event loop running on one daemon thread of this process.

    Args:
        name: The thread's name (shown by debuggers, ``py-spy`` and thread dumps).
    """

    def __init__(self, name: str) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        # Held while a call is handed to the loop and while `stop` marks it stopped, so
        # every call handed over before the stop is seen (and settled) by `_run`.
        self._handover = threading.Lock()
        self._stopped = False
        # The task of each call in flight, by the future its caller waits on (loop thread only).
        self._tasks: dict[concurrent.futures.Future[Any], asyncio.Task[Any]] = {}
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._started.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()
        # Calls still running when stopped: cancelled, so no caller waits forever.
        leftover = list(self._tasks.values())
        for task in leftover:
            task.cancel()
        if leftover:
            self.loop.run_until_complete(asyncio.wait(leftover))

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop; block until it finishes and return its result.

        The coroutine runs in a copy of the caller's context (its contextvars: the
        current trace span, for one). Its exception is raised here, in the calling
        thread. If the caller is interrupted while waiting (``KeyboardInterrupt``), the
        coroutine is cancelled.

        Raises:
            LoopStoppedError: `stop` was called.
            RuntimeError: Called from the loop's own thread (it would wait forever).
        """
        if threading.get_ident() == self.thread.ident:
            coro.close()
            raise RuntimeError("LoopThread.call from the loop's own thread would deadlock")
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        context = contextvars.copy_context()
        with self._handover:
            if self._stopped:
                coro.close()
                raise LoopStoppedError("this loop thread was stopped")
            self.loop.call_soon_threadsafe(self._start, coro, done, context)
        try:
            return done.result()
        except BaseException:
            # Interrupted while waiting: the coroutine must not go on without its caller.
            # (When it is the coroutine's own exception, it is done and this does nothing.)
            if not done.cancel():
                with self._handover:
                    if not self._stopped:
                        self.loop.call_soon_threadsafe(self._cancel, done)
            raise

    def _cancel(self, done: concurrent.futures.Future[Any]) -> None:
        task = self._tasks.get(done)
        if task is not None:
            task.cancel()

    def _start(
        self,
        coro: Coroutine[Any, Any, T],
        done: concurrent.futures.Future[T],
        context: contextvars.Context,
    ) -> None:
        if not done.set_running_or_notify_cancel():
            coro.close()
            return
        task = self.loop.create_task(coro, context=context)

        def finished(task: asyncio.Task[T]) -> None:
            del self._tasks[done]
            if task.cancelled():
                done.set_exception(concurrent.futures.CancelledError())
                return
            error = task.exception()
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(task.result())

        self._tasks[done] = task
        task.add_done_callback(finished)

    def in_flight(self) -> list[asyncio.Task[Any]]:
        """The tasks of calls not finished yet (call on the loop's own thread)."""
        return list(self._tasks.values())

    def stop(self) -> None:
        """Stop the loop, join the thread and close the loop (in the process that made it).

        Calls still running are cancelled (their callers get ``CancelledError``); later
        calls raise `LoopStoppedError`. Idempotent.
        """
        with self._handover:
            if self._stopped:
                return
            self._stopped = True
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()

    def orphan(self, *, isolate: bool = True) -> None:
        """In a forked child: give up this copy without touching what the parent shares.

        Never runs or closes the loop. The copy is kept referenced for the child's
        lifetime; the selector's epoll descriptor is replaced by a private one and every
        descriptor registered in it (the loop's wake-up pipe, connection sockets) by
        ``/dev/null``, so a finalizer that runs anyway (at interpreter exit) cannot
        unregister the parent's descriptors or write on its sockets.

        `isolate` False only keeps the copy: for a fork noticed late (no fork hook
        ran), when the child may have reused those descriptor numbers since.
        """
        _ORPHANS.append(self)
        if not isolate:
            return
        selector: Any = getattr(self.loop, "_selector", None)
        if selector is None:
            return
        try:
            fds = [key.fd for key in selector.get_map().values()]
        except (RuntimeError, ValueError, OSError):
            fds = []
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for fd in fds:
                _replace_fd(fd, devnull)
        finally:
            os.close(devnull)
        inner: Any = getattr(selector, "_selector", None)
        epoll = getattr(select, "epoll", None)
        if epoll is not None and isinstance(inner, epoll):
            fresh = epoll()
            try:
                _replace_fd(inner.fileno(), fresh.fileno())
            finally:
                fresh.close()


def _replace_fd(fd: int, stand_in: int) -> None:
    # OSError: already closed, so nothing of the parent's is behind it.
    with contextlib.suppress(OSError):
        os.dup2(stand_in, fd)
