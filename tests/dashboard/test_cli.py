"""``taskrunner dashboard`` and ``taskrunner demo --dashboard`` as commands, in subprocesses."""

from __future__ import annotations

import argparse
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from taskrunner.cli import main

pytestmark = pytest.mark.timeout(90)

DEADLINE_SECONDS = 30
ROOT = Path(__file__).resolve().parents[2]


class Command:
    """A ``taskrunner`` subprocess whose stdout lines are read by a thread, with deadlines."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "taskrunner", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
            cwd=ROOT,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first line matching `pattern` within the deadline."""
        deadline = time.monotonic() + DEADLINE_SECONDS
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} in {self.seen}") from None
            if line is None:
                raise AssertionError(f"exited without a line matching {pattern!r}: {self.seen}")
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=DEADLINE_SECONDS)

    def close(self) -> None:
        """Kill the process if it still runs, and close its output once read to the end."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=DEADLINE_SECONDS)
        self._reader.join(DEADLINE_SECONDS)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def commands() -> Iterator[list[Command]]:
    started: list[Command] = []
    yield started
    for command in started:
        command.close()


def test_dashboard_serves_masks_the_url_and_stops_on_sigint(commands: list[Command]) -> None:
    command = Command(
        "dashboard", "--url", "memory://u:hunter2secret@store", "--port", "0", "--queue", "jobs"
    )
    commands.append(command)
    base = command.wait_for(r"at (http://127\.0\.0\.1:\d+)/")[1]
    queues = httpx.get(f"{base}/api/queues", timeout=10).json()["queues"]
    page = httpx.get(f"{base}/", timeout=10).text
    login = httpx.get(f"{base}/login", timeout=10)
    code = command.interrupt()

    assert [q["name"] for q in queues] == ["jobs"]
    assert "hunter2secret" not in page
    assert "hunter2secret" not in "\n".join(command.seen)
    assert login.status_code == 403  # read-only without --allow-actions
    assert code == 0


def test_an_app_gives_its_queue_and_schedules(commands: list[Command]) -> None:
    command = Command("dashboard", "tests.dashboard.apps:app", "--port", "0")
    commands.append(command)
    base = command.wait_for(r"at (http://127\.0\.0\.1:\d+)/")[1]
    queues = httpx.get(f"{base}/api/queues", timeout=10).json()["queues"]
    schedules = httpx.get(f"{base}/api/schedules", timeout=10).json()["schedules"]
    page = httpx.get(f"{base}/", timeout=10).text
    assert command.interrupt() == 0

    assert [q["name"] for q in queues] == ["dash-app"]
    assert [(s["name"], s["task"]) for s in schedules] == [("every-hour", "dash.tick")]
    assert schedules[0]["next"] % 3600 == 0
    assert 'href="/schedules"' in page


def test_allow_actions_prints_a_generated_token(commands: list[Command]) -> None:
    unset = {"TR_DASHBOARD_TOKEN": "", "TASKRUNNER_DASHBOARD_TOKEN": ""}
    command = Command("dashboard", "--port", "0", "--allow-actions", env=unset)
    commands.append(command)
    token = command.wait_for(r"dashboard token \(sign in with it\): (\S+)")[1]
    base = command.wait_for(r"at (http://127\.0\.0\.1:\d+)/")[1]
    signed = httpx.post(f"{base}/login", data={"token": token}, timeout=10)
    refused = httpx.post(f"{base}/login", data={"token": token[:-1]}, timeout=10)
    assert command.interrupt() == 0

    assert signed.status_code == 303
    assert "taskrunner_dashboard=" in signed.headers["set-cookie"]
    assert refused.status_code == 403


def test_session_hours_sets_how_long_a_sign_in_lasts(commands: list[Command]) -> None:
    token = "environment-token-0123456789"
    env = {"TASKRUNNER_DASHBOARD_TOKEN": token, "TR_DASHBOARD_TOKEN": ""}
    args = ("--port", "0", "--allow-actions", "--session-hours", "0.5")
    command = Command("dashboard", *args, env=env)
    commands.append(command)
    base = command.wait_for(r"at (http://127\.0\.0\.1:\d+)/")[1]
    signed = httpx.post(f"{base}/login", data={"token": token}, timeout=10)
    assert command.interrupt() == 0

    assert signed.status_code == 303
    assert "Max-Age=1800" in signed.headers["set-cookie"]


@pytest.mark.parametrize("hours", ["0", "-1", "nan", "soon"])
def test_a_session_time_that_is_not_positive_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], hours: str
) -> None:
    assert main(["dashboard", "--allow-actions", "--port", "0", "--session-hours", hours]) == 2
    assert "hours" in capsys.readouterr().err


@pytest.mark.parametrize("variable", ["TASKRUNNER_DASHBOARD_TOKEN", "TR_DASHBOARD_TOKEN"])
def test_a_token_from_the_environment_is_not_printed(
    commands: list[Command], variable: str
) -> None:
    token = "environment-token-0123456789"
    # The other name empty (unset); TASKRUNNER_DASHBOARD_TOKEN is no setting to refuse.
    env = {"TASKRUNNER_DASHBOARD_TOKEN": "", "TR_DASHBOARD_TOKEN": "", variable: token}
    command = Command("dashboard", "--port", "0", "--allow-actions", env=env)
    commands.append(command)
    base = command.wait_for(r"at (http://127\.0\.0\.1:\d+)/")[1]
    signed = httpx.post(f"{base}/login", data={"token": token}, timeout=10)
    assert command.interrupt() == 0

    assert signed.status_code == 303
    assert token not in "\n".join(command.seen)


def test_a_reachable_address_needs_allow_remote(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["dashboard", "--addr", "0.0.0.0", "--port", "0"])
    assert code == 2
    assert "--allow-remote" in capsys.readouterr().err


def test_a_short_token_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TR_DASHBOARD_TOKEN", "short")
    code = main(["dashboard", "--allow-actions", "--port", "0"])
    assert code == 2
    assert "at least 16 characters" in capsys.readouterr().err


def test_two_different_tokens_in_the_environment_are_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKRUNNER_DASHBOARD_TOKEN", "first-token-0123456789")
    monkeypatch.setenv("TR_DASHBOARD_TOKEN", "other-token-0123456789")
    code = main(["dashboard", "--allow-actions", "--port", "0"])
    assert code == 2
    err = capsys.readouterr().err
    assert "both set, to different tokens" in err
    assert "0123456789" not in err  # never the tokens themselves


def test_a_bad_queue_name_is_a_usage_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--port", "0", "--queue", "ok", "--queue", "<b>/x"]) == 2
    assert "queue name '<b>/x' must be" in capsys.readouterr().err


def test_a_bad_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--port", "65536"]) == 2
    assert "port must be 0-65535" in capsys.readouterr().err


def test_demo_dashboard_shows_the_demo_queue_and_stays_up(commands: list[Command]) -> None:
    command = Command("demo", "--dashboard", "--port", "0", "--tasks", "200", "--num-workers", "16")
    commands.append(command)
    base = command.wait_for(r"dashboard at (http://127\.0\.0\.1:\d+)/")[1]
    queue_name = command.wait_for(r"dispatched 200 tasks to '(demo-[0-9a-f]+)'")[1]
    command.wait_for(r"demo finished; the dashboard stays up")
    body = httpx.get(f"{base}/api/queues", timeout=10).json()
    assert command.interrupt() == 0

    assert [q["name"] for q in body["queues"]] == [queue_name]


def test_an_unknown_scheme_fails_at_start(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--port", "0", "--url", "nosuch://x"]) == 2
    assert "nosuch" in capsys.readouterr().err


def test_a_token_in_the_environment_puts_reading_behind_the_sign_in(
    commands: list[Command],
) -> None:
    token = "environment-token-0123456789"
    env = {"TASKRUNNER_DASHBOARD_TOKEN": token, "TR_DASHBOARD_TOKEN": ""}
    command = Command("dashboard", "--port", "0", "--queue", "jobs", env=env)
    commands.append(command)
    access = command.wait_for(r"^dashboard access: (.*)$")[1]
    base = command.wait_for(r"at (http://127\.0\.0\.1:\d+)/")[1]
    page = httpx.get(f"{base}/queues/jobs", timeout=10)
    api = httpx.get(f"{base}/api/queues", timeout=10)
    bearer = httpx.get(f"{base}/api/queues", headers={"authorization": f"Bearer {token}"})
    signed = httpx.post(f"{base}/login", data={"token": token}, timeout=10)
    assert command.interrupt() == 0

    assert access.startswith("reading needs sign-in with the token (sessions last 8 h")
    assert access.endswith("; read-only")
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=%2Fqueues%2Fjobs"
    assert api.status_code == 401
    assert [q["name"] for q in bearer.json()["queues"]] == ["jobs"]
    assert signed.status_code == 303
    assert token not in "\n".join(command.seen)


def test_without_a_token_the_start_up_line_says_reading_is_open(
    commands: list[Command],
) -> None:
    unset = {"TR_DASHBOARD_TOKEN": "", "TASKRUNNER_DASHBOARD_TOKEN": ""}
    command = Command("dashboard", "--port", "0", env=unset)
    commands.append(command)
    access = command.wait_for(r"^dashboard access: (.*)$")[1]
    command.wait_for(r"at (http://127\.0\.0\.1:\d+)/")
    assert command.interrupt() == 0

    assert access.startswith("reading needs no sign-in")
    assert "loopback only" in access


def test_a_reachable_address_without_a_token_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TASKRUNNER_DASHBOARD_TOKEN", raising=False)
    monkeypatch.delenv("TR_DASHBOARD_TOKEN", raising=False)
    code = main(["dashboard", "--addr", "0.0.0.0", "--allow-remote", "--port", "0"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--addr 0.0.0.0 without a token" in err
    assert "TASKRUNNER_DASHBOARD_TOKEN" in err


def test_the_session_hours_setting_of_the_environment(commands: list[Command]) -> None:
    token = "environment-token-0123456789"
    env = {
        "TASKRUNNER_DASHBOARD_TOKEN": token,
        "TR_DASHBOARD_TOKEN": "",
        "TASKRUNNER_DASHBOARD_SESSION_HOURS": "0.25",
    }
    command = Command("dashboard", "--port", "0", env=env)
    commands.append(command)
    access = command.wait_for(r"^dashboard access: (.*)$")[1]
    base = command.wait_for(r"at (http://127\.0\.0\.1:\d+)/")[1]
    signed = httpx.post(f"{base}/login", data={"token": token}, timeout=10)
    assert command.interrupt() == 0

    assert "sessions last 0.25 h" in access
    assert "Max-Age=900" in signed.headers["set-cookie"]


@pytest.mark.parametrize("hours", ["0", "-2", "inf", "nan", "eight"])
def test_a_bad_session_hours_setting_is_a_configuration_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, hours: str
) -> None:
    monkeypatch.setenv("TASKRUNNER_DASHBOARD_TOKEN", "environment-token-0123456789")
    monkeypatch.setenv("TASKRUNNER_DASHBOARD_SESSION_HOURS", hours)
    assert main(["dashboard", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("taskrunner: configuration error: TASKRUNNER_DASHBOARD_SESSION_HOURS=")
    assert hours in err


def test_the_flag_wins_over_the_session_hours_setting() -> None:
    from taskrunner.cli.dashboard import session_hours

    setting = {"TASKRUNNER_DASHBOARD_SESSION_HOURS": "3"}
    assert session_hours(argparse.Namespace(session_hours=2.0), setting) == 2.0
    assert session_hours(argparse.Namespace(session_hours=None), setting) == 3.0
    assert session_hours(argparse.Namespace(session_hours=None), {}) == 8.0


@pytest.mark.parametrize("command_args", [("dashboard",), ("demo", "--dashboard")])
def test_a_busy_port_is_one_line_and_exit_code_2(command_args: tuple[str, ...]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "taskrunner", *command_args, "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=DEADLINE_SECONDS,
            env={**os.environ, "TR_DASHBOARD_TOKEN": "", "TASKRUNNER_DASHBOARD_TOKEN": ""},
            cwd=ROOT,
        )

    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"taskrunner: configuration error: dashboard: cannot listen on 127.0.0.1:{port}: "
        "Address already in use"
    ]
    assert "Traceback" not in result.stdout
