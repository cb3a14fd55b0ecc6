"""Logger names, the fields every delivery-related record carries, and log formats.

Internal module. Records about a delivery carry ``task``, ``message_id``,
``delivery_count`` and ``consumer`` as record attributes (``extra``), so a formatter
or a JSON log handler can print them. `configure_logging` (used by the command line)
installs one stderr handler with either format:

* ``text`` (`DeliveryFormatter`): ``2026-01-01 12:00:00,000 WARNING taskrunner.executor:
  attempt 1 of 4 failed ... task=emails.send message_id=1-0 delivery_count=1
  consumer=emails:host:123-ab12cd:f0``
* ``json`` (`JsonFormatter`): one JSON object per line with ``time``, ``level``,
  ``logger``, ``message``, the delivery fields when present, and ``exception``.

Records logged by task code while it runs (any logger) get the same fields from
`taskrunner.current_task`, through `TaskContextFilter` on that handler.

Nothing secret is logged: payloads never are, URLs go through
`taskrunner.redaction.mask_url` first, and both formatters mask any
``scheme://user:password@`` that slips into a message (and, given
`taskrunner.redaction.url_secrets`, the password wherever else it appears).
"""

from __future__ import annotations

import datetime
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TextIO

import msgspec

from taskrunner.context import current_context
from taskrunner.queue import Delivery
from taskrunner.redaction import mask_secrets

__all__ = [
    "DELIVERY_FIELDS",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "DeliveryFormatter",
    "JsonFormatter",
    "TaskContextFilter",
    "configure_logging",
    "log_delivery",
    "log_fields",
]

# Attribute names added to every record about a delivery.
DELIVERY_FIELDS = ("task", "message_id", "delivery_count", "consumer")

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("text", "json")

LogFormat = Literal["text", "json"]

# The record attribute `log_fields` puts its fields in.
_FIELDS = "taskrunner_fields"

# Name of the handler `configure_logging` installs, so a second call replaces it.
_HANDLER_NAME = "taskrunner.cli"


def log_delivery(
    logger: logging.Logger,
    level: int,
    message: str,
    *args: object,
    delivery: Delivery,
    task: str | None = None,
    exc_info: BaseException | None = None,
) -> None:
    """Log `message` with the delivery's fields attached (cheap when the level is off)."""
    if not logger.isEnabledFor(level):
        return
    extra = {
        "task": task or "-",
        "message_id": delivery.message_id,
        "delivery_count": delivery.delivery_count,
        "consumer": delivery.receipt.consumer,
    }
    logger.log(level, message, *args, extra=extra, exc_info=exc_info)


def log_fields(
    logger: logging.Logger, level: int, message: str, fields: Mapping[str, object]
) -> None:
    """Log `message` with `fields` as structured data (cheap when the level is off).

    The text format appends them as ``key=value`` (None values left out), the JSON
    format adds them as keys of the record's object (never replacing its own keys).
    """
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={_FIELDS: dict(fields)})


def _delivery_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in DELIVERY_FIELDS if hasattr(record, name)}


def _extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, _FIELDS, None)
    return dict(fields) if isinstance(fields, dict) else {}


def _text_value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    # Quoted when it would not read back as one key=value word, and when it holds a
    # line break or another control character: a task name comes from the wire, and
    # must not be able to forge a log line.
    if text and text.isprintable() and not any(c in text for c in ' ="'):
        return text
    return _json_text(text)


def _json_text(text: str) -> str:
    return msgspec.json.encode(text).decode()


class TaskContextFilter(logging.Filter):
    """Adds the delivery fields of the running task to records that lack them.

    Attach it to a handler (not a logger) so it sees records of every logger,
    including the ones task code uses. Never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Fill in ``task``, ``message_id``, ``delivery_count``, ``consumer`` if unset."""
        if hasattr(record, "message_id"):
            return True
        context = current_context()
        if context is not None:
            record.task = context.task_name
            record.message_id = context.message_id
            record.delivery_count = context.delivery_count
            record.consumer = context.consumer
        return True


class DeliveryFormatter(logging.Formatter):
    """The standard text format, plus ``key=value`` delivery fields when a record has them.

    Args:
        fmt: The base format (default: time, level, logger, message).
        datefmt: Passed to `logging.Formatter`.
    """

    def __init__(
        self,
        fmt: str = "%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt: str | None = None,
        *,
        secrets: Sequence[str] = (),
    ) -> None:
        super().__init__(fmt, datefmt)
        self._secrets = tuple(secrets)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        """The base format followed by the record's delivery fields."""
        text = super().formatMessage(record)
        words = [f"{name}={_text_value(value)}" for name, value in _delivery_fields(record).items()]
        words += [
            f"{name}={_text_value(value)}"
            for name, value in _extra_fields(record).items()
            if value is not None
        ]
        return f"{text} {' '.join(words)}" if words else text

    def format(self, record: logging.LogRecord) -> str:
        """Format as usual, then mask URL passwords and the secrets given."""
        return mask_secrets(super().format(record), self._secrets)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line.

    Keys: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, the delivery
    fields when the record has them, and ``exception`` (the formatted traceback) when
    there is one.

    Args:
        secrets: Strings masked wherever they appear (see `url_secrets`).
    """

    _encoder = msgspec.json.Encoder()

    def __init__(self, *, secrets: Sequence[str] = ()) -> None:
        super().__init__()
        self._secrets = tuple(secrets)

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line, URL passwords masked."""
        document: dict[str, Any] = {
            "time": _iso_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": mask_secrets(record.getMessage(), self._secrets),
        }
        document.update(_delivery_fields(record))
        for name, value in _extra_fields(record).items():
            if name not in document:
                if value is not None and not isinstance(value, bool | int | float | str):
                    value = str(value)
                if isinstance(value, str):
                    # A field may quote an error message, and that a connection URL.
                    value = mask_secrets(value, self._secrets)
                document[name] = value
        if record.exc_info:
            exception = self.formatException(record.exc_info)
            document["exception"] = mask_secrets(exception, self._secrets)
        elif record.exc_text:
            document["exception"] = mask_secrets(record.exc_text, self._secrets)
        return self._encoder.encode(document).decode()


def _iso_time(created: float) -> str:
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def configure_logging(
    level: str = "info",
    log_format: LogFormat = "text",
    *,
    stream: TextIO | None = None,
    secrets: Sequence[str] = (),
) -> logging.Handler:
    """Send every log record at `level` or above to `stream` (default stderr) in `log_format`.

    URL passwords are masked in every record, and so is each string of `secrets`
    (the command line passes `url_secrets` of the configured URL).

    Replaces handlers a previous call installed, so calling it twice (tests calling
    the CLI in-process) does not duplicate lines. Other handlers are left alone.

    Returns:
        The installed handler.

    Raises:
        ValueError: Unknown level or format.
    """
    if level.lower() not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    formatter: logging.Formatter = (
        JsonFormatter(secrets=secrets)
        if log_format == "json"
        else DeliveryFormatter(secrets=secrets)
    )
    handler.setFormatter(formatter)
    handler.addFilter(TaskContextFilter())
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
