"""Logger names and the fields every delivery-related record carries.

Internal module. Records about a delivery carry ``task``, ``message_id``,
``delivery_count`` and ``consumer`` as record attributes (``extra``), so a formatter
or a JSON log handler can print them; the CLI's formatter does. Nothing secret is
logged: payloads never are, and URLs go through `mask_url` first.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

from taskrunner.queue import Delivery

__all__ = ["DELIVERY_FIELDS", "log_delivery", "mask_url"]

# Attribute names added to every record about a delivery.
DELIVERY_FIELDS = ("task", "message_id", "delivery_count", "consumer")


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
    """`url` with any password replaced by ``***`` (user names are kept)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{user}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
