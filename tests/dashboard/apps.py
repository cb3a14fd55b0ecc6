"""An App the dashboard's CLI tests load by import string (``tests.dashboard.apps:app``)."""

from __future__ import annotations

from taskrunner import App

app = App("dash-app")


@app.task(name="dash.tick")
def tick() -> None:
    pass


app.schedule("every-hour", tick, every=3600)
