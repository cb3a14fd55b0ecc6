"""The API: one queue and one `Producer` per process, opened in the lifespan.

The queue's connections belong to the event loop that serves the requests, so they are
opened in the lifespan (inside that loop) and closed when the server stops; every
request reuses them. ``TASKRUNNER_URL`` names the backend (``memory://`` by default).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

import taskrunner
from taskrunner import Producer, TaskState

from .tasks import Signup, app, send_welcome


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    url = os.environ.get("TASKRUNNER_URL", "memory://")
    async with taskrunner.open_queue(url, app.queue) as queue:
        api.state.producer = Producer(queue, app)
        yield


api = FastAPI(lifespan=lifespan)


def _producer(request: Request) -> Producer:
    producer: Producer = request.app.state.producer
    return producer


class SignupForm(BaseModel):
    """The request body (FastAPI validates it; the task's payload type is msgspec's)."""

    email: str


@api.post("/signups", status_code=202)
async def signup(form: SignupForm, request: Request) -> dict[str, str]:
    """Dispatch the welcome mail; answers at once with the job's id."""
    job = await _producer(request).dispatch(send_welcome, Signup(email=form.email))
    return {"job": job}


@api.get("/jobs/{job}")
async def job_status(job: str, request: Request) -> dict[str, Any]:
    """The job's state, and its result once it succeeded."""
    producer = _producer(request)
    status = await producer.status(job)
    if status.state is TaskState.UNKNOWN:
        raise HTTPException(404, f"no job {job}")
    answer: dict[str, Any] = {"job": job, "state": status.state.value}
    if status.state is TaskState.SUCCEEDED:
        answer["result"] = await producer.result(job, timeout=1)
    return answer
