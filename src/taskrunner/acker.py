"""Coalesces the acks of finished tasks into batched backend calls.

Internal module. Workers call `Acker.ack` and wait for the verdict; one loop sends
every ack queued since its last call in a single `Queue.ack`. Under load this batches
naturally (acks pile up while the previous call is in flight) without adding latency
when idle. While the backend is unreachable the loop keeps retrying with backoff; the
deliveries stay in the lease table meanwhile, so the lease keeper keeps their leases
alive, and the fenced ack reports any lease lost in between.

Results (issue 12): an ack may carry the task's result. The batch's results are
written with one `ResultStore.put_results` call before the batch's `Queue.ack`, so an
acked message always has its result, at the cost of one round trip per batch that
carries any. A terminal failure's result, written before its message is dead-lettered
or handed to the failed-task handler, takes the same road without an ack (`write`):
batched with the others, retried the same way. A failed write is retried with the
acks (a rewrite replaces the same keys); a write whose ack then reports the lease
lost stays, to be overwritten when the new owner finishes.

A failed send may still have been applied (the connection broke after the backend
acted, before the reply arrived). The retry of such an ack then finds the lease gone;
it is reported `Verdict.UNCERTAIN`, not lost: most likely it was this ack that
completed the message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass

from taskrunner.clock import Clock
from taskrunner.errors import BackendError, BackendUnavailableError, QueueClosedError
from taskrunner.leases import Verdict
from taskrunner.queue import Delivery, Queue, ResultStore, ResultWrite
from taskrunner.reconnect import ReconnectGate
from taskrunner.retry import Backoff

__all__ = ["Acker"]

_log = logging.getLogger("taskrunner.acker")

# Most deliveries per ack call; bounds the size of one backend request.
MAX_ACK_BATCH = 1000

_DONE = Verdict.DONE


@dataclass(slots=True)
class _Ack:
    # None: a result written on its own (`Acker.write`), with no ack.
    delivery: Delivery | None
    future: asyncio.Future[Verdict]
    result: ResultWrite | None
    # An earlier send failed, and the backend may have applied it.
    resent: bool = False


class Acker:
    """Batches acks to `queue`.

    Args:
        queue: The backend.
        clock: Paces retries while the backend is unreachable.
        gate: Told when the backend is unreachable (acks themselves are never held).
        results: Where results carried by acks are written (None: the backend has none).
    """

    def __init__(
        self,
        queue: Queue,
        *,
        clock: Clock,
        gate: ReconnectGate | None = None,
        results: ResultStore | None = None,
    ) -> None:
        self._queue = queue
        self._results = results
        self._gate = gate
        self._clock = clock
        self._pending: list[_Ack] = []
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()

    def ack(self, delivery: Delivery, result: ResultWrite | None = None) -> Awaitable[Verdict]:
        """Queue `delivery`'s ack (after writing `result`, if given); await the verdict.

        The verdict is DONE when completed, LOST when its lease was lost, UNCERTAIN when
        only a resend after a failed send found the lease gone. A plain function that
        returns the future itself, not a coroutine: every message passes here, and
        awaiting the future directly spares a coroutine frame and its resumption.

        Raises:
            QueueClosedError: (when awaited) The queue was closed before the ack could
                be sent.
            ValueError: A result was given but the acker has no result store (at once,
                before anything is queued).
        """
        if result is not None and self._results is None:
            raise ValueError("this backend has no result store; the result cannot be written")
        future: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._pending.append(_Ack(delivery, future, result))
        self._wake.set()
        return future

    def write(self, result: ResultWrite) -> Awaitable[Verdict]:
        """Queue `result` alone, to be written with the next batch; await its DONE.

        For a result whose message is not acked (a terminal failure, written before the
        dead-letter or the failed-task handler); retried like the batch's acks while
        the backend is unreachable.

        Raises:
            QueueClosedError: (when awaited) The queue was closed before the write.
            ValueError: The acker has no result store (at once).
        """
        if self._results is None:
            raise ValueError("this backend has no result store; the result cannot be written")
        future: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._pending.append(_Ack(None, future, result))
        self._wake.set()
        return future

    def close(self) -> None:
        """Finish: `run` returns once every queued ack has been sent."""
        self._closing.set()
        self._wake.set()

    async def run(self) -> None:
        """Send queued acks until `close` is called and the queue is empty."""
        backoff = Backoff()
        while True:
            await self._wake.wait()
            self._wake.clear()
            # One turn of the loop lets every worker finishing now join this batch.
            await asyncio.sleep(0)
            while self._pending:
                batch = self._pending[:MAX_ACK_BATCH]
                del self._pending[:MAX_ACK_BATCH]
                try:
                    writes = [item.result for item in batch if item.result is not None]
                    if writes and self._results is not None:
                        await self._results.put_results(writes)
                    acks = [item.delivery for item in batch if item.delivery is not None]
                    lost = await self._queue.ack(acks) if acks else []
                except QueueClosedError as exc:
                    _fail(batch, exc)
                    continue
                except BackendError as exc:
                    if self._gate is not None and isinstance(exc, BackendUnavailableError):
                        self._gate.failure()
                    for item in batch:
                        item.resent = True
                    self._pending[:0] = [item for item in batch if not item.future.done()]
                    delay = backoff.next_delay()
                    _log.warning("ack failed, retrying in %.2fs: %s", delay, exc)
                    await self._clock.sleep(delay)
                    continue
                except Exception as exc:
                    # A bug in the backend fails these acks (their messages come back
                    # after the lease) but must not end acking for the process.
                    _log.exception("ack crashed")
                    _fail(batch, exc)
                    continue
                except BaseException as exc:
                    _fail(batch, exc)
                    raise
                backoff.reset()
                if not lost:
                    # The common case: every ack applied, no verdict to work out.
                    for item in batch:
                        future = item.future
                        if not future.done():
                            future.set_result(_DONE)
                    continue
                lost_set = set(lost)
                for item in batch:
                    if not item.future.done():
                        item.future.set_result(_verdict(item, lost_set))
            if self._closing.is_set():
                return


def _verdict(item: _Ack, lost: set[Delivery]) -> Verdict:
    if item.delivery not in lost:
        return Verdict.DONE
    return Verdict.UNCERTAIN if item.resent else Verdict.LOST


def _fail(batch: list[_Ack], exc: BaseException) -> None:
    for item in batch:
        future = item.future
        if not future.done():
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
