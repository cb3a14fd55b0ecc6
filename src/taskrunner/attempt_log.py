"""One structured log line per finished attempt.

Internal module. `AttemptLogger` is an `taskrunner.AttemptObserver` the runner
installs: every attempt, once its outcome is settled with the backend, gets one
record on the ``taskrunner.attempts`` logger (its own name, so an operator can turn
the per-success lines on or off without touching the executor's warnings and errors):

* DEBUG for `Outcome.SUCCEEDED` (off at the default INFO level: a busy worker runs
  thousands of tasks a second);
* INFO for every other outcome (retried, dead-lettered, handled, lost, cancelled,
  unsettled).

The fields travel through `taskrunner.logs.log_fields`, so ``--log-format json`` gives
each as a JSON key and the text format appends them as ``key=value``: ``queue``,
``task``, ``message_id``, ``delivery_count``, ``consumer``, ``outcome`` (an `Outcome`
value), ``duration_seconds`` (when the task's code ran), ``latency_seconds`` (on the
first delivery only: later ones include the retry backoff) and ``error`` (a one-line
description of the failure; None on success). With the level off, a record costs
one cached ``isEnabledFor`` check.
"""

from __future__ import annotations

import logging

from taskrunner.attempts import Attempt, Outcome
from taskrunner.logs import log_fields
from taskrunner.redaction import mask_secrets

__all__ = ["LOGGER_NAME", "AttemptLogger"]

LOGGER_NAME = "taskrunner.attempts"
"""The logger the per-attempt lines are written to."""

_log = logging.getLogger(LOGGER_NAME)

_MESSAGES = {
    Outcome.SUCCEEDED: "attempt succeeded",
    Outcome.RETRIED: "attempt failed; released for a retry",
    Outcome.DEAD_LETTERED: "attempt failed; dead-lettered",
    Outcome.HANDLED: "attempt failed; taken by the failed-task handler",
    Outcome.LOST: "attempt lost its lease; the message is another worker's",
    Outcome.CANCELLED: "attempt cancelled by shutdown",
    Outcome.UNSETTLED: "attempt not settled with the backend; redelivered after its lease",
}

# A task name comes from the wire when the task is unknown: one line must stay short.
_MAX_TASK_CHARS = 200

_SUCCEEDED = Outcome.SUCCEEDED
_DEBUG = logging.DEBUG
_INFO = logging.INFO


class AttemptLogger:
    """An `AttemptObserver` that logs each finished attempt (see the module docstring).

    Args:
        logger: Where the lines go; ``taskrunner.attempts`` by default.
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = _log if logger is None else logger

    def attempt_started(self, attempt: Attempt) -> object:
        """Nothing to do when an attempt starts."""
        return None

    def attempt_finished(self, attempt: Attempt, token: object) -> None:
        """Log the attempt: DEBUG when it succeeded, INFO otherwise."""
        outcome = attempt.outcome
        level = _DEBUG if outcome is _SUCCEEDED else _INFO
        log = self._log
        if not log.isEnabledFor(level):
            return
        task = attempt.task
        if task is not None:
            if len(task) > _MAX_TASK_CHARS:
                task = task[:_MAX_TASK_CHARS] + "..."
            if not task.isprintable():
                # A newline in an unknown task's name must not forge a text-format line.
                task = task.encode("unicode_escape").decode("ascii")
        error = attempt.description
        if error is not None:
            # The JSON format does not mask its extra fields, and an exception's
            # message may quote a connection URL with its password.
            error = mask_secrets(error)
        fields = {
            "queue": attempt.queue,
            "task": "-" if task is None else task,
            "message_id": attempt.message_id,
            "delivery_count": attempt.delivery_count,
            "consumer": attempt.consumer,
            "outcome": None if outcome is None else outcome.value,
            "duration_seconds": attempt.seconds,
            "latency_seconds": attempt.latency_seconds if attempt.delivery_count == 1 else None,
            "error": error,
        }
        message = "attempt finished" if outcome is None else _MESSAGES[outcome]
        log_fields(log, level, message, fields)
