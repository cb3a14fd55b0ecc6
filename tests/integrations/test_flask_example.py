"""examples/flask_example through Flask's test client, on the suite's Redis.

A real request dispatches from a route through the app factory's `SyncProducer`; a real
worker runs the task on the same Redis; the job route then reports its result.
"""

from __future__ import annotations

import pytest
from examples.flask_example.tasks import app
from examples.flask_example.web import create_app

from .support import work_until_idle

pytestmark = pytest.mark.redis


def test_a_signup_dispatches_from_a_route_and_its_result_is_reported(
    redis_url: str, redis_namespace: str
) -> None:
    url = f"{redis_url}?namespace={redis_namespace}"
    web = create_app(url)
    try:
        client = web.test_client()
        answer = client.post("/signups", json={"email": "ada@example.com"})
        assert answer.status_code == 202, answer.text
        job = answer.json["job"]  # type: ignore[index]
        assert client.get(f"/jobs/{job}").json == {"job": job, "state": "ready"}

        work_until_idle(url, app)

        done = client.get(f"/jobs/{job}").json
    finally:
        web.extensions["taskrunner"].close()
    assert done == {"job": job, "state": "succeeded", "result": "welcome, ada@example.com"}


def test_a_bad_payload_is_refused_at_the_route_and_nothing_is_dispatched(
    redis_url: str, redis_namespace: str
) -> None:
    url = f"{redis_url}?namespace={redis_namespace}"
    web = create_app(url)
    try:
        client = web.test_client()
        assert client.post("/signups", json={"email": 42}).status_code == 422
        assert client.get("/jobs/0-1").status_code == 404
    finally:
        web.extensions["taskrunner"].close()
