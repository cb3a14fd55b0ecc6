"""The example's tasks (``taskrunner worker examples.flask_example.tasks:app``)."""

from __future__ import annotations

import taskrunner

app = taskrunner.App("mail")


@app.task(store_result=True)
def send_welcome(email: str) -> str:
    """Pretend to send the welcome mail (a plain ``def``: it runs in a worker thread)."""
    return f"welcome, {email}"
