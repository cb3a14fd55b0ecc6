"""The process's one `SyncProducer`, made from ``settings.TASKRUNNER`` on first use."""

from __future__ import annotations

import threading

from django.conf import settings

import taskrunner

from .tasks import app

_lock = threading.Lock()
_producer: taskrunner.SyncProducer | None = None


def producer() -> taskrunner.SyncProducer:
    """The shared producer (thread-safe and fork-safe: one per process is enough)."""
    global _producer
    with _lock:
        if _producer is None:
            _producer = taskrunner.SyncProducer(settings.TASKRUNNER["url"], app)
        return _producer


def is_postgres_queue() -> bool:
    """Whether the queue lives in PostgreSQL (then dispatches join the request's transaction)."""
    url: str = settings.TASKRUNNER["url"]
    return url.startswith(("postgresql://", "postgres://"))
