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

Nothing secret is logged: payloads never are, URLs go through `mask_url` first, and
both formatters mask any ``scheme://user:password@`` that slips into a message.
"""

from __future__ import annotations

import datetime
import logging
import re
import sys
from typing import Any, Literal, TextIO
from urllib.parse import urlsplit, urlunsplit

import msgspec

from taskrunner.context import _CURRENT
from taskrunner.queue import Delivery

__all__ = [
    "DELIVERY_FIELDS",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "DeliveryFormatter",
    "JsonFormatter",
    "TaskContextFilter",
    "configure_logging",
    "log_delivery",
    "mask_secrets",
    "mask_url",
]

# Attribute names added to every record about a delivery.
DELIVERY_FIELDS = ("task", "message_id", "delivery_count", "consumer")

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("text", "json")

LogFormat = Literal["text", "json"]

# Name of the handler `configure_logging` installs, so a second call replaces it.
_HANDLER_NAME = "taskrunner.cli"

# user:password@ inside any URL-looking text; group 1 keeps everything up to the colon.
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@")


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


def mask_url(url: str) -> str:
    """`url` with any password replaced by ``***`` (user names are kept).

    Never raises: text that does not parse as a URL is masked by pattern instead.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
        port = parts.port
    except ValueError:
        return mask_secrets(url)
    if password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if port is not None:
        host = f"{host}:{port}"
    netloc = f"{user}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def mask_secrets(text: str) -> str:
    """`text` with the password of every ``scheme://user:password@`` replaced by ``***``."""
    return _URL_PASSWORD.sub(r"\1***@", text)


def _delivery_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in DELIVERY_FIELDS if hasattr(record, name)}


class TaskContextFilter(logging.Filter):
    """Adds the delivery fields of the running task to records that lack them.

    Attach it to a handler (not a logger) so it sees records of every logger,
    including the ones task code uses. Never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Fill in ``task``, ``message_id``, ``delivery_count``, ``consumer`` if unset."""
        if hasattr(record, "message_id"):
            return True
        context = _CURRENT.get(None)
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
    ) -> None:
        super().__init__(fmt, datefmt)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        """The base format followed by the record's delivery fields."""
        text = super().formatMessage(record)
        fields = _delivery_fields(record)
        if fields:
            text += " " + " ".join(f"{name}={value}" for name, value in fields.items())
        return text

    def format(self, record: logging.LogRecord) -> str:
        """Format as usual, then mask URL passwords."""
        return mask_secrets(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line.

    Keys: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, the delivery
    fields when the record has them, and ``exception`` (the formatted traceback) when
    there is one.
    """

    _encoder = msgspec.json.Encoder()

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line, URL passwords masked."""
        document: dict[str, Any] = {
            "time": _iso_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": mask_secrets(record.getMessage()),
        }
        document.update(_delivery_fields(record))
        if record.exc_info:
            document["exception"] = mask_secrets(self.formatException(record.exc_info))
        elif record.exc_text:
            document["exception"] = mask_secrets(record.exc_text)
        return self._encoder.encode(document).decode()


def _iso_time(created: float) -> str:
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def configure_logging(
    level: str = "info", log_format: LogFormat = "text", *, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record at `level` or above to `stream` (default stderr) in `log_format`.

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
    handler.setFormatter(JsonFormatter() if log_format == "json" else DeliveryFormatter())
    handler.addFilter(TaskContextFilter())
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
