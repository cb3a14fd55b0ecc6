"""Log formats: delivery fields on every record, JSON lines, no secrets."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from taskrunner import Delivery, Receipt
from taskrunner.context import _CURRENT, TaskContext
from taskrunner.logs import configure_logging, log_delivery
from taskrunner.redaction import mask_secrets, mask_url

DELIVERY = Delivery(
    message_id="7-0",
    body=b"{}",
    delivery_count=2,
    receipt=Receipt(consumer="q:host:1-ab:f0", delivery_count=2),
)


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    level = root.level
    yield logging.getLogger("tests.cli.logs")
    for handler in [h for h in root.handlers if h.get_name() == "taskrunner.cli"]:
        root.removeHandler(handler)
    root.setLevel(level)


def test_text_format_appends_delivery_fields_when_a_record_has_them(
    logger: logging.Logger,
) -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream=stream)

    log_delivery(logger, logging.WARNING, "attempt %d failed", 2, delivery=DELIVERY, task="t.x")
    logger.info("plain record")

    first, second = stream.getvalue().splitlines()
    assert first.endswith(
        "WARNING tests.cli.logs: attempt 2 failed task=t.x message_id=7-0 delivery_count=2 "
        "consumer=q:host:1-ab:f0"
    )
    assert second.endswith("INFO tests.cli.logs: plain record")


def test_json_format_writes_one_object_per_line_with_delivery_fields(
    logger: logging.Logger,
) -> None:
    stream = io.StringIO()
    configure_logging("debug", "json", stream=stream)

    log_delivery(logger, logging.ERROR, "dead-lettered", delivery=DELIVERY, task="t.x")
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("crashed")

    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["level"] == "ERROR"
    assert first["logger"] == "tests.cli.logs"
    assert first["message"] == "dead-lettered"
    assert (first["task"], first["message_id"]) == ("t.x", "7-0")
    assert (first["delivery_count"], first["consumer"]) == (2, "q:host:1-ab:f0")
    assert first["time"].endswith("Z")
    assert "ValueError: boom" in second["exception"]
    assert "task" not in second


def test_records_logged_by_task_code_carry_the_running_task_fields(
    logger: logging.Logger,
) -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream=stream)
    context = TaskContext(
        task_name="emails.send",
        task_id="abc",
        message_id="9-1",
        delivery_count=1,
        max_attempts=4,
        consumer="c:f0",
    )

    token = _CURRENT.set(context)
    try:
        logging.getLogger("user.code").info("sending")
    finally:
        _CURRENT.reset(token)

    assert (
        stream.getvalue()
        .rstrip()
        .endswith("sending task=emails.send message_id=9-1 delivery_count=1 consumer=c:f0")
    )


def test_formatters_mask_url_passwords_in_messages(logger: logging.Logger) -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)

    logger.info("connecting to %s", "redis://admin:hunter2@db:6379/0")

    assert "hunter2" not in stream.getvalue()
    assert "redis://admin:***@db:6379/0" in stream.getvalue()


def test_configure_logging_twice_keeps_one_handler(logger: logging.Logger) -> None:
    first, second = io.StringIO(), io.StringIO()

    configure_logging("info", stream=first)
    configure_logging("info", stream=second)
    logger.info("once")

    assert first.getvalue() == ""
    assert second.getvalue().count("once") == 1


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        (
            "rediss://user:pw@host/0?ssl_cert_reqs=none",
            "rediss://user:***@host/0?ssl_cert_reqs=none",
        ),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("redis://u:pw@[::1]:6379/0", "redis://u:***@[::1]:6379/0"),
        ("redis://u:pw@host:notaport/0", "redis://u:***@host:notaport/0"),
        ("memory://", "memory://"),
    ],
)
def test_mask_url_hides_passwords_and_never_raises(url: str, masked: str) -> None:
    assert mask_url(url) == masked
    assert "pw" not in mask_secrets(f"failed: {url}")


def test_a_task_name_with_a_line_break_cannot_forge_a_text_log_line() -> None:
    from taskrunner.logs import DeliveryFormatter

    record = logging.LogRecord("taskrunner.executor", logging.ERROR, __file__, 1, "dead", (), None)
    record.task = "evil\n2026-01-01 00:00:00,000 INFO forged: all good"
    record.message_id = "1-0"
    record.delivery_count = 1
    record.consumer = "c"

    line = DeliveryFormatter().format(record)

    assert "\n" not in line
    assert 'task="evil\\n2026-01-01 00:00:00,000 INFO forged: all good"' in line


def test_json_fields_have_url_passwords_and_given_secrets_masked() -> None:
    from taskrunner.logs import JsonFormatter, log_fields

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter(secrets=["hunter2"]))
    logger = logging.getLogger("tests.json-fields")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        log_fields(
            logger,
            logging.INFO,
            "attempt failed",
            {"error": "cannot reach redis://app:s3cret@db:6379/0 (token hunter2)", "n": 3},
        )
    finally:
        logger.removeHandler(handler)

    document = json.loads(stream.getvalue())
    assert "s3cret" not in document["error"]
    assert "hunter2" not in document["error"]
    assert document["n"] == 3
