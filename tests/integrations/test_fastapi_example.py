"""examples/fastapi_example through FastAPI's test client, on the suite's Redis.

A real HTTP request dispatches from the endpoint through the lifespan's `Producer`; a
real worker runs the task on the same Redis; the job endpoint then reports its result.
"""

from __future__ import annotations

import pytest
from examples.fastapi_example.tasks import app
from examples.fastapi_example.web import api
from fastapi.testclient import TestClient

from .support import work_until_idle

pytestmark = pytest.mark.redis


def test_a_signup_dispatches_the_welcome_mail_and_its_result_is_reported(
    redis_url: str, redis_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{redis_url}?namespace={redis_namespace}"
    monkeypatch.setenv("TASKRUNNER_URL", url)
    with TestClient(api) as client:
        answer = client.post("/signups", json={"email": "ada@example.com"})
        assert answer.status_code == 202, answer.text
        job = answer.json()["job"]
        assert client.get(f"/jobs/{job}").json()["state"] == "ready"

        work_until_idle(url, app)

        done = client.get(f"/jobs/{job}").json()
    assert done == {"job": job, "state": "succeeded", "result": "welcome, ada@example.com"}


def test_a_bad_payload_is_refused_by_the_endpoint_and_nothing_is_dispatched(
    redis_url: str, redis_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKRUNNER_URL", f"{redis_url}?namespace={redis_namespace}")
    with TestClient(api) as client:
        assert client.post("/signups", json={"mail": "x"}).status_code == 422
        assert client.get("/jobs/0-1").status_code == 404
