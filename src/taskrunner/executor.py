"""Runs one delivery: decode, look up, enforce retries, run, then ack, retry or give up.

Internal module. The decisions, in order:

1. A body larger than the size limit is a *terminal failure* at once.
2. A delivery count above the *runner-wide cap* is a terminal failure without even
   decoding the body. The cap is the most attempts any task of the app allows: the
   largest ``max_retries`` of any registered task or the runner's ``max_retries``,
   whichever is larger, plus one. Earlier deliveries never finished, and the body
   itself may be what killed their workers (a crash in decoding that no exception
   handler sees), so it is not decoded again.
3. A malformed envelope, an unknown task name or a payload of the wrong type is a
   terminal failure at once: retrying cannot help. Any exception raised while
   decoding or validating counts (the codec turns each into a `MessageError`), so a
   hostile body never crashes the worker.
4. A delivery count above the task's allowed attempts (max_retries + 1) means earlier
   attempts never finished (a worker crashed or lost its lease): terminal failure
   without running the task again.
5. Otherwise the task runs (``async def`` on the loop, plain ``def`` in a worker thread),
   under its timeout if it has one.
6. Success: ack (through the coalescing acker). Failure with attempts left: release with
   exponential backoff and jitter. Failure on the last attempt: terminal failure.

A terminal failure calls the failed-task handler once, or dead-letters with the reason.
Nothing is acked, released or dead-lettered for a delivery whose lease was reported
lost: the message belongs to another worker now. A task cancelled at shutdown gives
its message back at once (release without delay), then lets the cancellation go on.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from taskrunner.acker import Acker
from taskrunner.app import App, Task
from taskrunner.attempts import Attempt, AttemptObserver, Outcome
from taskrunner.callbacks import call_callback
from taskrunner.clock import Clock, wait_future
from taskrunner.codec import decode_envelope
from taskrunner.config import RunnerConfig
from taskrunner.context import _CURRENT, PendingContext
from taskrunner.errors import (
    MessageError,
    PayloadTooLargeError,
    TaskTimeoutError,
)
from taskrunner.failure import TaskFailure
from taskrunner.leases import Lease, Verdict
from taskrunner.logs import log_delivery
from taskrunner.messages import Envelope, ResultEnvelope
from taskrunner.queue import Delivery, Queue, ResultStore, ResultWrite
from taskrunner.retry import retry_delay
from taskrunner.stats import StatsRecorder

__all__ = ["Executor"]

_log = logging.getLogger("taskrunner.executor")

# Dead-letter reasons are for people; an exception message longer than this is cut.
_MAX_REASON_CHARS = 2000

# The stored error type of a message delivered more often than its task allows.
_TOO_MANY_DELIVERIES = "TooManyDeliveries"

_RESULT_ENCODER = msgspec.json.Encoder()
# The value of a failure's record (the ResultEnvelope default).
_NULL = msgspec.Raw(b"null")


@dataclass(frozen=True, slots=True)
class _Refusal:
    """Why a delivery is a terminal failure before its task runs."""

    reason: str
    error: BaseException | None = None
    error_type: str | None = None


class Executor:
    """Carries one delivery from lease to a final outcome.

    Args:
        queue: The backend.
        app: Registered tasks and the message size limit.
        config: Retry, timeout and failure-handler settings.
        clock: Measures durations and timeouts.
        acker: Sends acks in batches.
        stats: Where outcomes are counted.
        threads: Returns the thread pool for plain ``def`` tasks (created lazily).
        observer: Told about every delivery (see `taskrunner.attempts`; several are
            combined into one with `taskrunner.attempts.combine`).
        results: Where task results are written; None when the backend has no store.
    """

    def __init__(
        self,
        queue: Queue,
        app: App,
        config: RunnerConfig,
        *,
        clock: Clock,
        acker: Acker,
        stats: StatsRecorder,
        threads: Callable[[], ThreadPoolExecutor],
        observer: AttemptObserver | None = None,
        results: ResultStore | None = None,
    ) -> None:
        self._queue = queue
        self._app = app
        self._config = config
        self._clock = clock
        self._acker = acker
        self._stats = stats
        self._threads = threads
        self._observer = observer
        self._results = results
        self._warned_no_store: set[str] = set()

    async def execute(self, lease: Lease) -> None:
        """Run `lease`'s delivery to its outcome; never raises except cancellation.

        Every observer hears of the delivery before the task runs and again once its
        outcome is settled, cancellation included.
        """
        # One coroutine for the whole delivery (no nested body coroutine): this path
        # runs for every message, and each extra frame costs on every resumption.
        delivery = lease.delivery
        attempt = Attempt.begin(
            self._app.queue,
            delivery.message_id,
            delivery.delivery_count,
            delivery.receipt.consumer,
            self._clock.time(),
        )
        envelope, task, payload, attempts, refusal = self._prepare(delivery)
        if envelope is not None:
            lease.task = attempt.task = envelope.task
            attempt.task_id = envelope.id
            attempt.enqueued_at = envelope.enqueued_at
            attempt.due_at = envelope.due_at
            attempt.headers = envelope.headers
        observer = self._observer
        token: object = None
        if observer is not None:
            try:
                token = observer.attempt_started(attempt)
            except Exception:  # an observer's bug must never affect the delivery
                _log.exception("attempt observer %r raised", observer)
        try:
            if refusal is not None:
                attempt.outcome = await self._give_up(
                    lease,
                    refusal.reason,
                    attempt=attempt,
                    envelope=envelope,
                    task=task,
                    error=refusal.error,
                    error_type=refusal.error_type,
                )
                return
            # Narrowing for the type checker: without a refusal, both were read.
            assert envelope is not None
            assert task is not None
            context = PendingContext(
                task.name,
                envelope.id,
                delivery.message_id,
                delivery.delivery_count,
                attempts,
                delivery.receipt.consumer,
                envelope.headers,
                envelope.scheduled_for,
            )
            started = self._clock.monotonic()
            attempt.ran = True
            error: BaseException | None = None
            result: ResultWrite | None = None
            try:
                timeout = task.timeout_seconds or self._config.timeout_seconds
                if task.is_async and timeout is None:
                    # `_run`'s common case written out: an async task without a
                    # timeout, awaited in place (one frame less on every message).
                    reset = _CURRENT.set(context)  # not `token`: the observer's
                    try:
                        if task.takes_payload:
                            value = await task.func(payload)
                        else:
                            value = await task.func()
                    finally:
                        _CURRENT.reset(reset)
                else:
                    value = await self._run(lease, task, payload, context)
                if task.store_result:
                    result = self._success_result(task, envelope, delivery, value)
            except asyncio.CancelledError as exc:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    attempt.seconds = self._clock.monotonic() - started
                    await self._release_after_cancel(lease, task.name)
                    raise
                # Nobody cancelled this worker: the task's own code raised CancelledError.
                error = exc
            except Exception as exc:
                error = exc
            seconds = attempt.seconds = self._clock.monotonic() - started
            if error is not None:
                attempt.error = error
                attempt.description = _describe(error)
                self._stats.attempt_finished(task.name, seconds, ok=False)
                attempt.outcome = await self._failed(
                    lease, envelope, task, error, attempts, attempt
                )
            else:
                self._stats.attempt_finished(task.name, seconds, ok=True)
                attempt.outcome = await self._complete(lease, task.name, result)
        except asyncio.CancelledError:
            attempt.outcome = Outcome.CANCELLED
            raise
        except Exception:
            # A bug (the runner logs it): the message comes back after its lease.
            attempt.outcome = Outcome.UNSETTLED
            raise
        finally:
            if observer is not None:
                try:
                    observer.attempt_finished(attempt, token)
                except Exception:
                    _log.exception("attempt observer %r raised", observer)

    def _prepare(
        self, delivery: Delivery
    ) -> tuple[Envelope | None, Task[Any] | None, Any, int, _Refusal | None]:
        """Decode and check a delivery: envelope, task, payload, attempts allowed, or a refusal.

        The checks, in order, as the module docstring lists them (1-4).
        """
        limit = self._app.max_message_bytes
        if len(delivery.body) > limit:
            reason = f"message of {len(delivery.body)} bytes exceeds max_message_bytes={limit}"
            return None, None, None, 0, _Refusal(reason)
        most_attempts = self._over_runner_wide_cap(delivery.delivery_count)
        if most_attempts is not None:
            return (
                None,
                None,
                None,
                0,
                _Refusal(
                    f"delivered {delivery.delivery_count} times, more than any task of this "
                    f"app allows ({most_attempts} attempt(s): the largest max_retries + 1); "
                    "earlier deliveries did not finish, so it is not decoded again: a worker "
                    "probably crashed or lost its lease while reading or running it"
                ),
            )
        envelope: Envelope | None = None
        task: Task[Any] | None = None
        try:
            envelope = decode_envelope(delivery.body)
            task = self._app.get_task(envelope.task)
            payload = task.codec.decode(envelope.payload)
        except MessageError as exc:
            return envelope, task, None, 0, _Refusal(str(exc), error=exc)
        max_retries = self._config.max_retries if task.max_retries is None else task.max_retries
        attempts = max_retries + 1
        if delivery.delivery_count > attempts:
            return (
                envelope,
                task,
                None,
                attempts,
                _Refusal(
                    f"delivered {delivery.delivery_count} times but task {task.name!r} allows "
                    f"{attempts} attempt(s) (max_retries={max_retries}); earlier deliveries "
                    "did not finish, so a worker probably crashed or lost its lease while "
                    "running it",
                    error_type=_TOO_MANY_DELIVERIES,
                ),
            )
        return envelope, task, payload, attempts, None

    def _over_runner_wide_cap(self, delivery_count: int) -> int | None:
        """The runner-wide cap on attempts when `delivery_count` exceeds it, else None."""
        most = self._config.max_retries
        if delivery_count <= most + 1:
            return None  # the common case, without looking at every task
        # Read now, not at start: tasks may be registered after the runner was built.
        for task in self._app.tasks.values():
            if task.max_retries is not None and task.max_retries > most:
                most = task.max_retries
        return most + 1 if delivery_count > most + 1 else None

    async def _run(
        self, lease: Lease, task: Task[Any], payload: Any, context: PendingContext
    ) -> Any:
        """Run the task's code once; returns what it returned."""
        args = (payload,) if task.takes_payload else ()
        timeout = task.timeout_seconds or self._config.timeout_seconds
        token = _CURRENT.set(context)
        try:
            if task.is_async:
                if timeout is None:
                    return await task.func(*args)
                # A child task, so a timeout on the injected clock can cancel it alone.
                child = asyncio.ensure_future(task.func(*args))
                try:
                    finished = await wait_future(self._clock, child, timeout)
                except BaseException:
                    # Cancelled at shutdown: the attempt must not outlive its worker.
                    await _cancel_and_wait(child)
                    raise
                if not finished:
                    await _cancel_and_wait(child)
                    raise TaskTimeoutError(f"task {task.name!r} timed out after {timeout:g}s")
                return child.result()
            call = contextvars.copy_context().run
            # A thread cannot be interrupted. The lease remembers it: a worker cancelled
            # while it runs leaves the message leased instead of releasing it to run twice,
            # and a timed-out attempt keeps its worker slot until the thread returns.
            future = asyncio.get_running_loop().run_in_executor(
                self._threads(), call, task.func, *args
            )
            lease.thread = future
            if timeout is None:
                await asyncio.shield(future)
            elif not await wait_future(self._clock, future, timeout):
                raise TaskTimeoutError(f"task {task.name!r} timed out after {timeout:g}s")
            return future.result()
        finally:
            _CURRENT.reset(token)

    def _success_result(
        self, task: Task[Any], envelope: Envelope, delivery: Delivery, value: Any
    ) -> ResultWrite | None:
        """The result to write with the ack; raises when `value` does not match the type."""
        if self._results is None:
            self._warn_no_store(task)
            return None
        body = self._result_body(
            task, envelope, delivery, "succeeded", value=task.result_codec.encode(value)
        )
        limit = self._app.max_message_bytes
        if len(body) > limit:
            # The same bound as messages: a runaway return value must not fill the backend.
            raise PayloadTooLargeError(
                f"task {task.name!r}: encoded result is {len(body)} bytes, larger than the "
                f"limit of {limit} bytes (max_message_bytes)",
                size=len(body),
                limit=limit,
            )
        return ResultWrite(message_id=delivery.message_id, body=body, ttl_seconds=task.result_ttl)

    def _result_body(
        self,
        task: Task[Any],
        envelope: Envelope,
        delivery: Delivery,
        outcome: Literal["succeeded", "failed"],
        *,
        value: msgspec.Raw = _NULL,
        error_type: str | None = None,
        error_message: str | None = None,
    ) -> bytes:
        """The stored record of `delivery`'s final attempt, encoded."""
        return _RESULT_ENCODER.encode(
            ResultEnvelope(
                task=task.name,
                task_id=envelope.id,
                outcome=outcome,
                value=value,
                error_type=error_type,
                error_message=error_message,
                delivery_count=delivery.delivery_count,
                finished_at=self._clock.time(),
            )
        )

    async def _store_failure(
        self,
        lease: Lease,
        task: Task[Any],
        envelope: Envelope,
        error_type: str,
        message: str,
    ) -> None:
        """Write a terminal failure's result before the message is dead-lettered or handled."""
        if self._results is None:
            self._warn_no_store(task)
            return
        delivery = lease.delivery
        body = self._result_body(
            task, envelope, delivery, "failed", error_type=error_type, error_message=message
        )
        write = ResultWrite(message_id=delivery.message_id, body=body, ttl_seconds=task.result_ttl)
        try:
            # The acker's road, as a success's result: batched, retried while the
            # backend is unreachable.
            await self._acker.write(write)
        except Exception as exc:  # a closed queue, or a bug in the backend
            # The message still reaches its final state; its status then reads "dead"
            # (with the reason) instead of "failed", and result() times out.
            log_delivery(
                _log,
                logging.ERROR,
                "could not store the failure result (%r); going on without it",
                exc,
                delivery=delivery,
                task=task.name,
            )

    def _warn_no_store(self, task: Task[Any]) -> None:
        if task.name not in self._warned_no_store:
            self._warned_no_store.add(task.name)
            _log.warning(
                "task %r has store_result=True but this backend has no result store; "
                "its results are not stored",
                task.name,
            )

    async def _complete(
        self, lease: Lease, task_name: str, result: ResultWrite | None = None
    ) -> Outcome:
        if lease.lost:
            log_delivery(
                _log,
                logging.WARNING,
                "finished after its lease was lost; not acked",
                delivery=lease.delivery,
                task=task_name,
            )
            return Outcome.LOST

        # `_settle` written out: this is every successful message's path, and the
        # helper's frame and closure cost on each one.
        lease.settling = True
        ack = self._acker.ack
        try:
            while True:
                delivery = lease.delivery
                verdict = await ack(delivery, result)
                if verdict is not Verdict.LOST or lease.delivery is delivery:
                    break
                # A newer delivery was adopted while the ack was in flight: the old
                # receipt was stale, so ack again with the new one (as `_settle` does).
        except Exception as exc:
            # Closed queue, or a bug in the backend: the message comes back after its lease.
            log_delivery(
                _log,
                logging.ERROR,
                "could not ack (%r); it will be redelivered when its lease lapses",
                exc,
                delivery=lease.delivery,
                task=task_name,
            )
            return Outcome.UNSETTLED
        if verdict is Verdict.LOST:
            self._lease_lost_on_reply(lease, "ack", task_name)
            return Outcome.LOST
        if verdict is Verdict.UNCERTAIN:
            self._stats.ack_uncertain += 1
            log_delivery(
                _log,
                logging.WARNING,
                "ack uncertain: its first send failed, and the resend found the lease gone; "
                "most likely the first send completed the message (else its lease had "
                "lapsed and another worker has it)",
                delivery=lease.delivery,
                task=task_name,
            )
        return Outcome.SUCCEEDED

    async def _failed(
        self,
        lease: Lease,
        envelope: Envelope,
        task: Task[Any],
        error: BaseException,
        attempts: int,
        attempt: Attempt,
    ) -> Outcome:
        if lease.lost:
            log_delivery(
                _log,
                logging.WARNING,
                "failed after its lease was lost; left to the new owner",
                delivery=lease.delivery,
                task=task.name,
                exc_info=error,
            )
            return Outcome.LOST
        description = _describe(error)
        # The current delivery: an adopted one counts, as the backend counts it.
        delivery = lease.delivery
        if delivery.delivery_count >= attempts:
            return await self._give_up(
                lease,
                f"attempt {delivery.delivery_count} of {attempts} failed: {description}",
                attempt=attempt,
                envelope=envelope,
                task=task,
                error=error,
            )
        delay = retry_delay(
            delivery.delivery_count,
            base_seconds=self._config.retry_base_seconds,
            max_seconds=self._config.retry_max_seconds,
        )

        async def release(delivery: Delivery) -> Verdict:
            return _verdict(await self._queue.release([delivery], delay_seconds=delay))

        try:
            verdict = await self._settle(lease, release)
        except Exception as exc:  # unreachable backend, or a bug in it
            log_delivery(
                _log,
                logging.ERROR,
                "attempt failed (%s) and the release failed too (%s); "
                "it will be redelivered when its lease lapses",
                description,
                exc,
                delivery=delivery,
                task=task.name,
            )
            return Outcome.UNSETTLED
        if verdict is not Verdict.DONE:
            self._lease_lost_on_reply(lease, "release", task.name)
            return Outcome.LOST
        self._stats.retried(task.name)
        log_delivery(
            _log,
            logging.WARNING,
            "attempt %d of %d failed, retrying in %.1fs: %s",
            delivery.delivery_count,
            attempts,
            delay,
            description,
            delivery=delivery,
            task=task.name,
        )
        return Outcome.RETRIED

    async def _give_up(
        self,
        lease: Lease,
        reason: str,
        *,
        attempt: Attempt,
        envelope: Envelope | None = None,
        task: Task[Any] | None = None,
        error: BaseException | None = None,
        error_type: str | None = None,
    ) -> Outcome:
        task_name = None if envelope is None else envelope.task
        if lease.lost:
            return Outcome.LOST
        # A hostile body can make a reason huge (an unknown task name of a megabyte).
        reason = _shorten(reason)
        if attempt.description is None:
            attempt.description = reason
        if task is not None and envelope is not None and task.store_result:
            kind = error_type or (type(error).__name__ if error is not None else "Failed")
            await self._store_failure(lease, task, envelope, kind, reason)
        handler = self._config.failed_task_handler
        if handler is not None:
            failure = TaskFailure(
                delivery=lease.delivery, reason=reason, envelope=envelope, error=error
            )
            try:
                await call_callback(handler, failure)
            except Exception as exc:
                reason = f"{reason}; the failed-task handler raised {_describe(exc)}"
                log_delivery(
                    _log,
                    logging.ERROR,
                    "failed-task handler raised; dead-lettering instead",
                    delivery=lease.delivery,
                    task=task_name,
                    exc_info=exc,
                )
            else:
                self._stats.handled += 1
                outcome = await self._complete(lease, task_name or "-")
                return Outcome.HANDLED if outcome is Outcome.SUCCEEDED else outcome

        # Backends store text: a lone surrogate (str() of an error about an undecodable
        # file name) is refused, and a reason that cannot be stored would leave the
        # message to come back every lease. Escaped, it reads the same.
        reason = _storable(reason)

        async def dead_letter(delivery: Delivery) -> Verdict:
            return _verdict(await self._queue.dead_letter([delivery], reason=reason))

        try:
            verdict = await self._settle(lease, dead_letter)
        except Exception as exc:  # unreachable backend, or a bug in it
            log_delivery(
                _log,
                logging.ERROR,
                "could not dead-letter (%s): %s; it will be redelivered when its lease lapses",
                exc,
                reason,
                delivery=lease.delivery,
                task=task_name,
            )
            return Outcome.UNSETTLED
        if verdict is not Verdict.DONE:
            self._lease_lost_on_reply(lease, "dead_letter", task_name)
            return Outcome.LOST
        self._stats.dead_lettered(task_name)
        log_delivery(
            _log,
            logging.ERROR,
            "dead-lettered: %s",
            reason,
            delivery=lease.delivery,
            task=task_name,
            exc_info=error,
        )
        return Outcome.DEAD_LETTERED

    async def _release_after_cancel(self, lease: Lease, task_name: str) -> None:
        if lease.lost:
            return
        if lease.thread is not None and not lease.thread.done():
            log_delivery(
                _log,
                logging.WARNING,
                "cancelled while its thread still runs; the message stays leased and is "
                "reclaimed after the lease if the thread does not finish",
                delivery=lease.delivery,
                task=task_name,
            )
            return

        async def release(delivery: Delivery) -> Verdict:
            return _verdict(await self._queue.release([delivery], delay_seconds=0))

        try:
            await self._settle(lease, release)
        except (Exception, asyncio.CancelledError) as exc:
            log_delivery(
                _log,
                logging.WARNING,
                "cancelled; could not release (%r), it will be redelivered when its lease lapses",
                exc,
                delivery=lease.delivery,
                task=task_name,
            )
        else:
            log_delivery(
                _log,
                logging.WARNING,
                "cancelled at shutdown; released for redelivery",
                delivery=lease.delivery,
                task=task_name,
            )

    async def _settle(
        self, lease: Lease, send: Callable[[Delivery], Awaitable[Verdict]]
    ) -> Verdict:
        """Send the lease's ack, release or dead-letter with its current receipt."""
        # From now on a heartbeat reaching the backend after this call would find the
        # lease gone and report it lost; that report is moot, this call's reply decides.
        lease.settling = True
        while True:
            delivery = lease.delivery
            verdict = await send(delivery)
            if verdict is not Verdict.LOST or lease.delivery is delivery:
                return verdict
            # A newer delivery of the message was adopted while this one was in flight,
            # so the old receipt was stale: send again with the new one.

    def _lease_lost_on_reply(self, lease: Lease, operation: str, task_name: str | None) -> None:
        if not lease.lost:
            lease.lost = True
            self._stats.lease_lost += 1
        log_delivery(
            _log,
            logging.WARNING,
            "%s reported the lease lost; another worker owns the message now",
            operation,
            delivery=lease.delivery,
            task=task_name,
        )


async def _cancel_and_wait(child: asyncio.Future[Any]) -> None:
    child.cancel()
    try:
        await child
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception:  # the child's own error after its cancellation is moot
        pass


def _verdict(lost: list[Delivery]) -> Verdict:
    """The verdict of a release or dead-letter of one delivery, from its lost list."""
    return Verdict.LOST if lost else Verdict.DONE


def _describe(error: BaseException) -> str:
    return _shorten(f"{type(error).__name__}: {error}")


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_REASON_CHARS else text[:_MAX_REASON_CHARS] + "..."


def _storable(text: str) -> str:
    """`text` with lone surrogates written as backslash escapes: text UTF-8 can encode."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
