"""The web app: `create_app` makes the process's one `SyncProducer`.

A SyncProducer is thread-safe and fork-safe, so one made here serves every thread of a
threaded server and keeps working in the processes a pre-fork server (gunicorn) forks
from it. It is closed when the interpreter exits (and may be closed earlier with
``app.extensions["taskrunner"].close()``).
"""

from __future__ import annotations

import os
from typing import Any, cast

from flask import Flask, abort, current_app, request

import taskrunner
from taskrunner import PayloadValidationError, TaskState

from .tasks import app as tasks, send_welcome


def create_app(url: str | None = None) -> Flask:
    """The Flask app; `url` (default ``TASKRUNNER_URL``, else ``memory://``) is the queue."""
    web = Flask(__name__)
    web.extensions["taskrunner"] = taskrunner.SyncProducer(
        url or os.environ.get("TASKRUNNER_URL", "memory://"), tasks
    )

    @web.post("/signups")
    def signup() -> tuple[dict[str, Any], int]:
        body = request.get_json(silent=True) or {}
        # Whatever the client sent: the task's payload type (str) validates it.
        email = cast(str, body.get("email"))
        try:
            job = _producer().dispatch(send_welcome, email)
        except PayloadValidationError as exc:
            return {"error": str(exc)}, 422
        return {"job": job}, 202

    @web.get("/jobs/<job>")
    def job_status(job: str) -> dict[str, Any]:
        producer = _producer()
        status = producer.status(job)
        if status.state is TaskState.UNKNOWN:
            abort(404)
        answer: dict[str, Any] = {"job": job, "state": status.state.value}
        if status.state is TaskState.SUCCEEDED:
            answer["result"] = producer.result(job, timeout=1)
        return answer

    return web


def _producer() -> taskrunner.SyncProducer:
    producer: taskrunner.SyncProducer = current_app.extensions["taskrunner"]
    return producer
