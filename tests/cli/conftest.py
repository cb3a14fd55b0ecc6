"""Fixtures of the command-line tests: backend URLs and a runner for `cli.main`."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from taskrunner import Producer, cli, open_queue
from tests.cli.apps import QUEUE, app


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class Cli:
    """Calls `cli.main` in-process and captures what it prints."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys

    def __call__(self, *argv: str) -> Result:
        self._capsys.readouterr()
        code = cli.main(list(argv))
        captured = self._capsys.readouterr()
        return Result(code, captured.out, captured.err)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Cli:
    # A directory without a pyproject.toml: no [tool.taskrunner] of the checkout applies.
    monkeypatch.chdir(tmp_path)
    # The tests choose every setting; none may leak in from the developer's shell.
    for name in list(os.environ):
        if name.startswith("TASKRUNNER_") and not name.startswith(
            ("TASKRUNNER_TEST_", "TASKRUNNER_CONFORMANCE_")
        ):
            monkeypatch.delenv(name)
    return Cli(capsys)


@pytest.fixture
def memory_url() -> str:
    """A memory:// store no other test uses (stores live as long as the process)."""
    return f"memory://{uuid.uuid4().hex[:12]}"


@pytest.fixture
def redis_ns_url(redis_url: str, redis_namespace: str) -> str:
    """The test server's URL with the test's own namespace."""
    separator = "&" if "?" in redis_url else "?"
    return f"{redis_url}{separator}namespace={redis_namespace}"


def seed(url: str, task: str, payloads: list[Any], queue: str = QUEUE) -> list[str]:
    """Dispatch `payloads` of the test App's `task` in this process (memory:// included)."""

    async def send() -> list[str]:
        async with open_queue(url, queue) as opened:
            return await Producer(opened, app).dispatch_many(task, payloads)

    return asyncio.run(send())


def queue_len(url: str, queue: str = QUEUE) -> int:
    async def read() -> int:
        async with open_queue(url, queue) as opened:
            return await opened.len()

    return asyncio.run(read())
