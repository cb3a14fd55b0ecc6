"""The example's tasks (the worker imports this module: ``examples.fastapi_example.tasks:app``)."""

from __future__ import annotations

import msgspec

import taskrunner

app = taskrunner.App("signups")


class Signup(msgspec.Struct, frozen=True):
    """A new user to greet."""

    email: str


@app.task(store_result=True)
async def send_welcome(signup: Signup) -> str:
    """Pretend to send the welcome mail; the result is what was sent."""
    return f"welcome, {signup.email}"
