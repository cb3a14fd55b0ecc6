"""The per-attempt log line (taskrunner.attempt_log)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from taskrunner import App, Producer
from taskrunner.attempt_log import LOGGER_NAME, AttemptLogger
from taskrunner.attempts import Attempt, Outcome
from taskrunner.logs import DeliveryFormatter, JsonFormatter
from taskrunner.testing import FakeClock, run_until_idle
from taskrunner_backends.memory import InMemoryQueue

from .support import config

WALL = 1_767_225_600.0


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def json(self) -> list[dict[str, Any]]:
        formatter = JsonFormatter()
        return [json.loads(formatter.format(record)) for record in self.records]


@contextmanager
def _recorded(level: int) -> Iterator[_Records]:
    handler = _Records()
    logger = logging.getLogger(LOGGER_NAME)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def _attempt(**fields: Any) -> Attempt:
    defaults: dict[str, Any] = {
        "queue": "emails",
        "message_id": "1700000000000-0",
        "delivery_count": 1,
        "consumer": "emails:host:1-ab:f0",
        "task": "emails.send",
        "ran": True,
        "seconds": 0.125,
        "outcome": Outcome.SUCCEEDED,
        "enqueued_at": WALL,
        "started_at": WALL + 0.5,
    }
    return Attempt(**{**defaults, **fields})


def _log(attempt: Attempt, logger: AttemptLogger | None = None) -> None:
    observer = logger or AttemptLogger()
    observer.attempt_finished(attempt, observer.attempt_started(attempt))


def test_a_success_is_one_debug_line_with_every_field_as_a_json_key() -> None:
    with _recorded(logging.DEBUG) as handler:
        _log(_attempt())

    [line] = handler.json()
    assert line["level"] == "DEBUG"
    assert line["logger"] == "taskrunner.attempts"
    assert line["message"] == "attempt succeeded"
    assert line["queue"] == "emails"
    assert line["task"] == "emails.send"
    assert line["message_id"] == "1700000000000-0"
    assert line["delivery_count"] == 1
    assert line["consumer"] == "emails:host:1-ab:f0"
    assert line["outcome"] == "succeeded"
    assert line["duration_seconds"] == 0.125
    assert line["latency_seconds"] == 0.5
    assert line["error"] is None


def test_a_failure_is_an_info_line_with_its_error() -> None:
    with _recorded(logging.INFO) as handler:
        _log(
            _attempt(
                delivery_count=2,
                outcome=Outcome.RETRIED,
                error=RuntimeError("smtp down"),
                description="RuntimeError: smtp down",
            )
        )

    [line] = handler.json()
    assert line["level"] == "INFO"
    assert line["outcome"] == "retried"
    assert line["error"] == "RuntimeError: smtp down"
    assert line["delivery_count"] == 2
    # A redelivery's wait includes the retry backoff: no latency is claimed.
    assert line["latency_seconds"] is None
    assert line["duration_seconds"] == 0.125


@pytest.mark.parametrize("outcome", [o for o in Outcome if o is not Outcome.SUCCEEDED])
def test_every_outcome_but_success_is_logged_at_info(outcome: Outcome) -> None:
    with _recorded(logging.INFO) as handler:
        _log(_attempt(outcome=outcome, description="why"))

    [record] = handler.records
    assert record.levelno == logging.INFO
    assert handler.json()[0]["outcome"] == outcome.value


def test_a_success_is_not_logged_at_the_default_info_level() -> None:
    with _recorded(logging.INFO) as handler:
        _log(_attempt())

    assert handler.records == []


class _Exploding(logging.Logger):
    def _log(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a record was built although its level is off")


def test_nothing_is_built_when_the_level_is_off() -> None:
    logger = _Exploding("exploding")
    logger.setLevel(logging.WARNING)

    _log(_attempt(), AttemptLogger(logger))
    _log(_attempt(outcome=Outcome.DEAD_LETTERED, description="x"), AttemptLogger(logger))


def test_the_text_format_appends_the_fields_as_key_value() -> None:
    with _recorded(logging.DEBUG) as handler:
        _log(_attempt())

    text = DeliveryFormatter().format(handler.records[0])
    assert "DEBUG taskrunner.attempts: attempt succeeded" in text
    for word in (
        "task=emails.send",
        "message_id=1700000000000-0",
        "delivery_count=1",
        "outcome=succeeded",
        "duration_seconds=0.125",
        "latency_seconds=0.5",
    ):
        assert word in text.split()
    assert "error=" not in text


def test_a_body_that_is_no_envelope_logs_a_dash_for_its_task() -> None:
    with _recorded(logging.INFO) as handler:
        _log(
            _attempt(
                task=None,
                ran=False,
                seconds=None,
                enqueued_at=None,
                outcome=Outcome.DEAD_LETTERED,
                description="not an envelope",
            )
        )

    [line] = handler.json()
    assert line["task"] == "-"
    assert line["duration_seconds"] is None
    assert line["latency_seconds"] is None
    assert line["error"] == "not an envelope"


def test_a_huge_task_name_from_the_wire_is_cut_short() -> None:
    with _recorded(logging.INFO) as handler:
        _log(_attempt(task="x" * 100_000, outcome=Outcome.DEAD_LETTERED, description="unknown"))

    [line] = handler.json()
    assert line["task"] == "x" * 200 + "..."


def test_control_characters_in_a_task_name_are_escaped() -> None:
    with _recorded(logging.INFO) as handler:
        _log(_attempt(task="evil\n2026 INFO forged", outcome=Outcome.DEAD_LETTERED))

    text = DeliveryFormatter().format(handler.records[0])
    assert "\n" not in text
    assert handler.json()[0]["task"] == "evil\\n2026 INFO forged"


def test_a_url_password_in_an_error_is_masked_in_json() -> None:
    with _recorded(logging.INFO) as handler:
        _log(
            _attempt(
                outcome=Outcome.RETRIED,
                description="ConnectionError: redis://app:hunter2@db:6379/0 refused",
            )
        )

    [line] = handler.json()
    assert "hunter2" not in json.dumps(line)
    assert "redis://app:***@db:6379/0" in line["error"]


async def test_a_runner_logs_each_finished_attempt() -> None:
    clock = FakeClock(wall_start=WALL, autojump=True)
    app = App("tests")
    queue = InMemoryQueue(clock=clock)

    @app.task(name="ok")
    async def ok() -> None:
        await clock.sleep(2.0)

    @app.task(name="bad", max_retries=1)
    async def bad() -> None:
        raise ValueError("broken")

    producer = Producer(queue, app, clock=clock)
    ok_id = await producer.dispatch(ok)
    bad_id = await producer.dispatch(bad)
    with _recorded(logging.DEBUG) as handler:
        await run_until_idle(
            app, queue, clock=clock, fail_fast=False, config=config(retry_base_seconds=1.0)
        )

    lines = handler.json()
    [success] = [line for line in lines if line["message_id"] == ok_id]
    assert (success["level"], success["outcome"], success["task"]) == ("DEBUG", "succeeded", "ok")
    assert success["duration_seconds"] == 2.0
    assert success["latency_seconds"] == 0.0
    failures = [line for line in lines if line["message_id"] == bad_id]
    assert [(f["level"], f["outcome"], f["delivery_count"]) for f in failures] == [
        ("INFO", "retried", 1),
        ("INFO", "dead_lettered", 2),
    ]
    assert all(f["error"] == "ValueError: broken" for f in failures)
    assert failures[0]["latency_seconds"] == 0.0
    assert failures[1]["latency_seconds"] is None
