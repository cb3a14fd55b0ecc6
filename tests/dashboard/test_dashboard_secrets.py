"""The dashboard never shows a secret of its URL: start-up line, pages, API, headers.

``taskrunner dashboard`` runs as a process of its own on a secret-bearing URL, and
every route of the application (`routes_of` reads them from the app itself, so a new
route without a case here fails `test_every_route_has_a_case`) is fetched: the pages,
the API, the sign-in and action endpoints (refused: no token is configured, the board
is read-only), every static file. Neither fragment of the secret may appear in a
body, a header or anything the process printed. The forms are a representative set
per scheme (the password with every special character, or in quotes without a user
name, and PostgreSQL's ``?password=`` and ``?sslpassword=``): the masking of every form
is tests/cli/test_secrets_everywhere.py's; here it is every place the dashboard
shows a URL. On live servers the queue holds a message and a dead letter first, so
the detail routes show one; the TLS Redis address refuses connections, so its pages
show the backend's errors. ``taskrunner demo --dashboard`` serves the same pages: it
is fetched likewise once, on Redis.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Mount, Route

from taskrunner.cli import main
from taskrunner.dashboard import Dashboard, QueueSet, create_app
from tests.cli.apps import QUEUE
from tests.cli.conftest import seed
from tests.cli.secret_urls import (
    FORMS,
    Target,
    assert_clean,
    cluster_target,
    memory_target,
    postgres_target,
    redis_target,
    rediss_target,
    secret_cluster,  # noqa: F401 - a fixture
    secret_redis,  # noqa: F401 - a fixture
)

pytestmark = pytest.mark.timeout(120)

APP = "tests.cli.apps:app"
ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "src" / "taskrunner" / "dashboard" / "static"
DEADLINE_SECONDS = 30


def routes_of(app: Any) -> set[tuple[str, str]]:
    """(method, path template) of every route of the app; a mount as ``path/*``."""
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        if isinstance(route, Mount):
            found.add(("GET", f"{route.path}/*"))
        elif isinstance(route, Route):
            for method in route.methods or ():
                if method != "HEAD":
                    found.add((method, route.path))
    return found


#: Every route, fetched in this order ({name}, {dead_id}, {message_id}: a queue, and
#: ids the list routes before them showed).
CASES: list[tuple[str, str]] = [
    ("GET", "/"),
    ("GET", "/api/overview"),
    ("GET", "/api/queues"),
    ("GET", "/queues/{name}"),
    ("GET", "/api/queues/{name}"),
    ("GET", "/api/queues/{name}/messages"),
    ("GET", "/api/queues/{name}/messages/{message_id}"),
    ("GET", "/queues/{name}/dead"),
    ("GET", "/api/queues/{name}/dead-letters"),
    ("GET", "/api/queues/{name}/dead-letters/{dead_id}"),
    ("GET", "/queues/{name}/dead/{dead_id}"),
    ("GET", "/queues/{name}/dead/confirm"),
    ("POST", "/queues/{name}/dead/action"),
    ("GET", "/schedules"),
    ("GET", "/api/schedules"),
    ("GET", "/login"),
    ("POST", "/login"),
    ("POST", "/logout"),
    ("GET", "/static/*"),
]


def test_every_route_has_a_case() -> None:
    board = Dashboard(queues=QueueSet([QUEUE], _never_opened), url="memory://")

    assert routes_of(create_app(board)) == set(CASES)


async def _never_opened(name: str) -> Any:
    raise AssertionError(f"queue {name} opened")


def _ids(document: Any, keys: tuple[str, ...]) -> Iterator[str]:
    """Every string under one of `keys`, anywhere in a JSON document."""
    if isinstance(document, dict):
        for key, value in document.items():
            if key in keys and isinstance(value, str | int):
                yield str(value)
            yield from _ids(value, keys)
    elif isinstance(document, list):
        for value in document:
            yield from _ids(value, keys)


class Dashboard_process:  # noqa: N801 - reads as what it is
    """``taskrunner dashboard`` in a process of its own; its output read by a thread."""

    def __init__(
        self,
        url: str,
        argv: tuple[str, ...] = ("dashboard", "--app", APP),
        *,
        path: tuple[str, ...] = (),
    ) -> None:
        argv = (*argv, "--port", "0", "--url", url, "--log-level", "debug")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "taskrunner", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join((*path, *sys.path))},
            cwd=ROOT,
        )
        self.output: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def address(self, pattern: str = r"dashboard of \S+ at (http://127\.0\.0\.1:\d+)/") -> str:
        """The first group of `pattern` (the ``http://host:port`` of the start-up line),
        found in the output within the deadline."""
        deadline = time.monotonic() + DEADLINE_SECONDS
        while time.monotonic() < deadline:
            found = re.search(pattern, "".join(self.output))
            if found:
                return found[1]
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"no {pattern!r} in:\n{''.join(self.output)}")

    def stop(self) -> str:
        """SIGTERM, and everything it printed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=DEADLINE_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=DEADLINE_SECONDS)
        self._reader.join(timeout=DEADLINE_SECONDS)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return "".join(self.output)


def fetch_everything(base: str, name: str) -> list[tuple[str, int, str]]:
    """(what, status, headers and body) of every case, ids filled in from the lists."""
    ids = {"message_id": "0-1", "dead_id": "0-1"}
    shown: list[tuple[str, int, str]] = []
    with httpx.Client(base_url=base, timeout=DEADLINE_SECONDS) as client:
        for method, template in CASES:
            if template == "/static/*":
                paths = [
                    f"/static/{p.relative_to(STATIC)}" for p in STATIC.rglob("*") if p.is_file()
                ]
            else:
                paths = [template.format(name=name, **ids)]
            for path in paths:
                response = client.request(method, path, data={"csrf": "x", "token": "x"})
                text = response.text
                shown.append(
                    (f"{method} {path}", response.status_code, f"{response.headers}\n{text}")
                )
                if template.endswith("/messages") and response.status_code == 200:
                    ids["message_id"] = next(_ids(response.json(), ("id", "message_id")), "0-1")
                if template.endswith("/dead-letters") and response.status_code == 200:
                    ids["dead_id"] = next(_ids(response.json(), ("id",)), "0-1")
    return shown


def _drop_schema(server_url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    scheme: str = request.param
    namespace = f"trsec-{uuid.uuid4().hex[:12]}"
    if scheme == "memory":
        yield memory_target()
    elif scheme == "rediss":
        yield rediss_target()
    elif scheme == "redis":
        yield redis_target(request.getfixturevalue("secret_redis").port, namespace)
    elif scheme == "redis+cluster":
        from taskrunner_backends.redis.testing import cluster_harness

        yield cluster_target(request.getfixturevalue("secret_cluster"), namespace)
        asyncio.run(cluster_harness().cleanup(namespace))
    else:
        server_url: str = request.getfixturevalue("postgres_url")
        schema = f"trsec_{secrets.token_hex(4)}"
        yield postgres_target(server_url, schema)
        _drop_schema(server_url, schema)


def _case(scheme: str, form_id: str, *marks: pytest.MarkDecorator) -> Any:
    form = next(f for f in FORMS if f.id == form_id)
    return pytest.param(scheme, form, id=f"{scheme}-{form_id}", marks=list(marks))


@pytest.mark.parametrize(
    ("target", "form"),
    [
        _case("memory", "user-all-of-them"),
        _case("rediss", "user-all-of-them"),
        _case("redis", "nouser-quotes", pytest.mark.redis),
        _case("redis+cluster", "user-all-of-them", pytest.mark.redis, pytest.mark.cluster),
        _case("postgresql", "option-password", pytest.mark.postgres),
        _case("postgresql", "option-sslpassword", pytest.mark.postgres),
    ],
    indirect=["target"],
)
def test_no_page_of_the_dashboard_shows_the_secret(
    target: Target, form: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = target.url(form)
    live = target.live(form) and target.scheme != "memory"
    if live:
        # Something on every page: a message waiting, and a dead letter to show.
        seed(url, "cli.greet", [{"name": "a"}])
        seed(url, "cli.fail", [{"name": "b"}])
        assert main(["worker", APP, "--burst", "--block-seconds", "0.01", "--url", url]) == 0
        seed(url, "cli.greet", [{"name": "c"}])
        assert_clean("".join(capsys.readouterr()), "the seeding")
    board = Dashboard_process(url)
    try:
        shown = fetch_everything(board.address(), QUEUE)
    finally:
        printed = board.stop()

    assert_clean(printed, "the dashboard process")
    assert "***" in printed.partition(" at http")[0]
    for what, status, text in shown:
        assert_clean(text, what)
        assert status < 500 or target.scheme == "rediss", (what, status, text)
    if live:
        statuses = {what: status for what, status, _ in shown}
        # The detail routes found what the lists showed.
        assert all(
            code == 200 for what, code in statuses.items() if what.startswith("GET /api/")
        ), statuses
        assert "***" in next(text for what, _, text in shown if what == "GET /")
    assert board.process.returncode == 0, printed


@pytest.mark.redis
def test_the_demo_dashboard_hides_the_secret(secret_redis: Any) -> None:  # noqa: F811
    form = next(f for f in FORMS if f.id == "user-all-of-them")
    url = redis_target(secret_redis.port, f"trsec-{uuid.uuid4().hex[:12]}").url(form)
    demo = Dashboard_process(url, ("demo", "--tasks", "20", "--num-workers", "2", "--dashboard"))
    try:
        base = demo.address(r"dashboard at (http://127\.0\.0\.1:\d+)/")
        demo.address(r"(demo finished)")
        names = list(
            _ids(httpx.get(f"{base}/api/queues", timeout=DEADLINE_SECONDS).json(), ("name",))
        )
        shown = fetch_everything(base, names[0] if names else QUEUE)
    finally:
        printed = demo.stop()

    assert_clean(printed, "the demo")
    for what, status, text in shown:
        assert_clean(text, what)
        assert status < 500, (what, status, text)
    assert "***" in next(text for what, _, text in shown if what == "GET /")


@pytest.fixture
def vault_installed(tmp_path: Path) -> str:
    """A directory that, on the import path, installs the vault:// backend's entry
    point (tests/cli/vault_backend.py) as pip would: a distribution's metadata."""
    info = tmp_path / "taskrunner_vault_test-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: taskrunner-vault-test\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(
        "[taskrunner.backends]\nvault = tests.cli.vault_backend:open_from_url\n"
    )
    return str(tmp_path)


def test_a_bug_behind_a_page_is_logged_without_the_secret(vault_installed: str) -> None:
    # The backend raises an unforeseen exception quoting its URL and key: the server
    # answers 500 and logs the traceback, which must be masked like every log line.
    url = "vault://user:S3CR%2FET9X@crash?vault_key=S3CR%26ET9X%2Fb64%3D%3D"
    board = Dashboard_process(url, ("dashboard", "--queue", QUEUE), path=(vault_installed,))
    try:
        base = board.address()
        response = httpx.get(f"{base}/", timeout=DEADLINE_SECONDS)
    finally:
        printed = board.stop()

    assert response.status_code == 500
    assert "RuntimeError: vault client bug while opening vault://user:***@crash" in printed
    assert_clean(printed + str(response.headers) + response.text, "the dashboard process")
