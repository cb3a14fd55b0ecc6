"""No command prints a secret of its URL, on live servers, whatever form the secret takes.

The enumeration (issue 32): every command of the parser (`command_paths` walks it, so
a new command without a case here fails `test_every_command_has_a_case`), each log
line on the way (``--log-level debug``, text and JSON formats), for every scheme —
memory, a third-party backend declaring its own secret option (vault://), Redis, its
Unix socket, TLS Redis (down), Redis Cluster, PostgreSQL — and every secret form of
tests/cli/secret_urls.py. Where a form opens the queue (`Target.live`), the commands
must succeed: what is checked is their normal output, not only an error message.

What runs for which forms, to keep the run short:

* every form x every scheme: ``config`` (text, JSON), ``inspect`` (text, JSON; with
  the backends' debug log lines, text and JSON), ``db status --json``
  (`test_common_commands_never_show_the_secret`);
* a representative set of forms x every scheme (a password with every special
  character, one in quotes without a user name, and the scheme's query-option form):
  every command of the parser, in a script that gives each something to show
  (messages, a dead letter, a cancelled one), the worker's start-up line in text and
  JSON logs included (`test_every_command_hides_the_secret`);
* the worker as a process of its own, with its ``/metrics`` page: text logs, and JSON
  logs of a supervisor and its two children reading the URL from the environment
  (`test_a_worker_process_and_its_metrics_hide_the_secret`), and the lines of a
  worker whose server went away (`test_the_lines_of_a_worker_whose_server_went_away...`);
* tracebacks of unforeseen exceptions, and a backend that cannot be imported;
* the URL given by TASKRUNNER_URL or a config file, for the representative forms
  (`test_a_url_from_the_environment_or_a_config_file_stays_hidden`);
* the dashboard command's start-up line, pages and API: tests/dashboard/test_dashboard_secrets.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from taskrunner.cli import _parser
from tests.cli.apps import QUEUE
from tests.cli.conftest import Cli, Result
from tests.cli.secret_urls import (
    FORMS,
    REDIS_USER,
    VAULT_OPTION,
    Form,
    Target,
    assert_clean,
    cluster_target,
    grant,
    memory_target,
    postgres_target,
    redis_target,
    rediss_target,
    secret_cluster,  # noqa: F401 - a fixture
    secret_redis,  # noqa: F401 - a fixture
    unix_target,
    vault_scheme,  # noqa: F401 - a fixture
    vault_target,
)
from tests.servers import free_port_run

APP = "tests.cli.apps:app"
_ROOT = Path(__file__).resolve().parents[2]

# (scheme, test id, marks)
TARGETS: list[tuple[str, str, list[pytest.MarkDecorator]]] = [
    ("memory", "memory", []),
    ("vault", "vault", []),
    ("redis", "redis", [pytest.mark.redis]),
    ("unix", "unix", [pytest.mark.redis]),
    ("rediss", "rediss-down", []),
    ("redis+cluster", "cluster", [pytest.mark.redis, pytest.mark.cluster]),
    ("postgresql", "postgresql", [pytest.mark.postgres]),
]


def cases(forms: list[Form]) -> list[Any]:
    """(target, form) for every target and form, but the vault's own option elsewhere:
    no other backend declares it (nor is it one of theirs)."""
    return [
        pytest.param(scheme, form, id=f"{name}-{form.id}", marks=marks)
        for scheme, name, marks in TARGETS
        for form in forms
        if form.place != VAULT_OPTION or scheme == "vault"
    ]


def _drop_schema(server_url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(server_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(scope="module")
def shared_schema(postgres_url: str) -> Iterator[str]:
    """A PostgreSQL schema for the tests that change nothing; dropped afterwards."""
    schema = f"trsec_{secrets.token_hex(4)}"
    yield schema
    _drop_schema(postgres_url, schema)


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    """The backend `request.param` names, with a namespace or schema of the test's own
    (`shared_schema` for the read-only commands)."""
    scheme: str = request.param
    namespace = f"trsec-{uuid.uuid4().hex[:12]}"
    if scheme == "memory":
        yield memory_target()
    elif scheme == "vault":
        request.getfixturevalue("vault_scheme")
        yield vault_target()
    elif scheme == "rediss":
        yield rediss_target()
    elif scheme in ("redis", "unix"):
        server = request.getfixturevalue("secret_redis")
        if scheme == "redis":
            yield redis_target(server.port, namespace)
        else:
            yield unix_target(str(server.socket_path), namespace)
    elif scheme == "redis+cluster":
        from taskrunner_backends.redis.testing import cluster_harness

        yield cluster_target(request.getfixturevalue("secret_cluster"), namespace)
        asyncio.run(cluster_harness().cleanup(namespace))
    elif request.function is test_common_commands_never_show_the_secret:
        # Those commands change nothing: they share a schema (migrated once).
        schema = request.getfixturevalue("shared_schema")
        yield postgres_target(request.getfixturevalue("postgres_url"), schema)
    else:
        server_url: str = request.getfixturevalue("postgres_url")
        schema = f"trsec_{secrets.token_hex(4)}"
        yield postgres_target(server_url, schema)
        _drop_schema(server_url, schema)


def check(result: Result, argv: list[str]) -> None:
    """Nothing of the secret in what the command printed, and no traceback."""
    assert_clean(result.out + result.err, argv)
    text = result.out + result.err
    # The one traceback expected: of the task that fails on purpose (cli.fail).
    assert text.count("Traceback") <= text.count("RuntimeError: cannot greet"), (argv, text)
    # 3: db status of a schema not yet migrated.
    assert result.code in (0, 1, 2, 3), (argv, result.code, result.err)


# What every form runs: cheap, and each prints the URL (or a log line carrying it).
COMMON = [
    ["config", "--log-level", "debug"],
    ["config", "--json"],
    ["inspect", "--app", APP, "--log-level", "debug"],
    ["inspect", "--app", APP, "--json", "--log-format", "json", "--log-level", "debug"],
    ["db", "status", "--json", "--log-level", "debug"],
]


@pytest.mark.parametrize(("target", "form"), cases(FORMS), indirect=["target"])
def test_common_commands_never_show_the_secret(run: Cli, target: Target, form: Form) -> None:
    url = target.url(form)
    results = {}
    for argv in COMMON:
        full = [*argv, "--url", url]
        results[argv[0], "--json" in argv, "json" in argv] = result = run(*full)
        check(result, full)
    if target.live(form):
        for key in [("config", False, False), ("inspect", False, False), ("inspect", True, True)]:
            assert results[key].code == 0, (key, results[key].err)
        # The URL is shown, masked: the queue was really read.
        assert "***" in results["inspect", True, True].out


def command_paths(parser: argparse.ArgumentParser) -> set[tuple[str, ...]]:
    """Every command and subcommand of the parser, as the words that name it."""
    found: set[tuple[str, ...]] = set()

    def walk(node: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        subparsers = [a for a in node._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers:
            found.add(path)
        for action in subparsers:
            for name, child in action.choices.items():
                walk(child, (*path, name))

    walk(parser, ())
    return found


# The commands of the script below, in order: (words naming it, arguments after them).
# <dead>, <delayed>, <scheduled>: ids an earlier step printed.
SCRIPT: list[tuple[tuple[str, ...], list[str]]] = [
    (("enqueue",), [APP, "cli.greet", "--payload", '{"name": "a"}']),
    (("enqueue",), [APP, "cli.fail", "--payload", '{"name": "b"}', "--json"]),
    (("enqueue",), [APP, "cli.greet", "--payload", '{"name": "c"}', "--delay", "1h"]),
    (
        ("enqueue",),
        [APP, "cli.greet", "--payload", '{"name": "d"}', "--at", "2099-01-01T00:00:00Z"],
    ),
    (("inspect",), ["--app", APP]),
    (("inspect",), ["--app", APP, "--json"]),
    (("schedules",), [APP]),
    (("schedules",), [APP, "--json"]),
    (("cancel",), [APP, "<delayed>", "--json"]),
    (("cancel",), [APP, "<scheduled>"]),
    # --block-seconds: the burst ends after one short empty read.
    (("worker",), [APP, "--burst", "--block-seconds", "0.01"]),
    (("dead-letters", "list"), ["--app", APP]),
    (("dead-letters", "list"), ["--app", APP, "--json"]),
    (("dead-letters", "show"), ["<dead>", "--app", APP]),
    (("dead-letters", "show"), ["<dead>", "--app", APP, "--json"]),
    (("dead-letters", "retry"), ["<dead>", "--app", APP, "--json"]),
    (("worker",), [APP, "--burst", "--block-seconds", "0.01", "--log-format", "json"]),
    (("dead-letters", "retry"), ["--all", "--app", APP]),
    (("dead-letters", "purge"), ["--all", "--yes", "--app", APP]),
    (("dead-letters", "purge"), ["--all", "--yes", "--app", APP, "--json"]),
    (("queue", "delete"), [QUEUE, "--yes", "--json"]),
    (("queue", "delete"), [QUEUE, "--yes"]),
    (("db", "migrate"), []),
    (("db", "migrate"), ["--json"]),
    (("db", "status"), []),
    (("db", "status"), ["--json"]),
    (("demo",), ["--tasks", "3", "--num-workers", "2"]),
    (("config",), []),
    (("config",), ["--json"]),
]

#: Commands run elsewhere, where they can be: they serve until a signal.
ELSEWHERE = {
    ("dashboard",): "tests/dashboard/test_dashboard_secrets.py",
    ("relay",): "tests/postgres/test_outbox_cli.py",
}


def test_every_command_has_a_case() -> None:
    covered = {words for words, _ in SCRIPT} | set(ELSEWHERE)

    assert command_paths(_parser()) == covered


REPRESENTATIVE = [
    form
    for form in FORMS
    if form.id in {"user-all-of-them", "nouser-quotes", "option-password", f"option-{VAULT_OPTION}"}
]


def _dead_id(result: Result) -> str | None:
    try:
        letters = result.json()["dead_letters"]
    except (ValueError, KeyError):
        return None
    return str(letters[0]["id"]) if letters else None


@pytest.mark.parametrize(("target", "form"), cases(REPRESENTATIVE), indirect=["target"])
def test_every_command_hides_the_secret(run: Cli, target: Target, form: Form) -> None:
    url = target.url(form)
    ids = {"<dead>": "1-0", "<delayed>": "1-0", "<scheduled>": "1-0"}
    failed: list[tuple[str, ...]] = []
    for words, arguments in SCRIPT:
        given = [ids.get(a, a) for a in arguments]
        full = [*words, *given, "--url", url, "--log-level", "debug"]
        result = run(*full)
        check(result, full)
        if result.code:
            failed.append(words)
        if words == ("worker",) and target.live(form):
            # The start-up line, with the URL masked, in either log format.
            assert re.search(r"worker for .* on \S+\*\*\*", result.err), result.err
        if words == ("enqueue",) and result.code == 0:
            for flag, key in (("--delay", "<delayed>"), ("--at", "<scheduled>")):
                if flag in arguments:
                    ids[key] = result.out.strip()
        if words == ("dead-letters", "list") and "--json" in arguments:
            ids["<dead>"] = _dead_id(result) or ids["<dead>"]
    if target.live(form):
        # Every command got as far as its normal output, but those the backend refuses:
        # enqueue on memory:// (gone when the command exits) and what follows from
        # it, db on backends without a schema.
        expected: set[tuple[str, ...]] = {("db", "migrate"), ("db", "status")}
        if target.scheme == "postgresql":
            expected = set()
        if target.scheme == "memory":
            expected |= {("enqueue",), ("cancel",), ("dead-letters", "show")}
            expected |= {("dead-letters", "retry")}
        assert set(failed) <= expected, sorted(set(failed))


def _wait_for(
    stream_path: Path, found: Callable[[str], str | None], process: subprocess.Popen[str]
) -> str:
    """What `found` finds in the file a process writes, within 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = stream_path.read_text()
        result = found(text)
        if result is not None:
            return result
        if process.poll() is not None:
            pytest.fail(f"the worker exited ({process.returncode}):\n{text}")
        time.sleep(0.05)
    pytest.fail(f"not found within 30 s:\n{stream_path.read_text()}")


def _stop(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)
        raise


_METRICS = re.compile(r"metrics on (http://127\.0\.0\.1:\d+/metrics)")


def _first_group(pattern: re.Pattern[str], text: str) -> str | None:
    found = pattern.search(text)
    return None if found is None else found[1]


def worker_process(
    argv: list[str], tmp_path: Path, *, env: dict[str, str], started: int = 1
) -> tuple[str, str, str]:
    """Run a worker process until it has logged `started` start-up lines; (stdout,
    stderr, /metrics page of the first child)."""
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    environment = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(sys.path)}
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "taskrunner", *argv],
            stdout=stdout,
            stderr=stderr,
            env=environment,
            cwd=tmp_path,
            text=True,
        )
    try:
        _wait_for(err, lambda text: "" if text.count("worker for") >= started else None, process)
        metrics_url = _wait_for(err, lambda text: _first_group(_METRICS, text), process)
        with urllib.request.urlopen(metrics_url, timeout=10) as response:
            page = response.read().decode() + str(response.headers)
    finally:
        code = _stop(process)
    assert code == 0, err.read_text()
    return out.read_text(), err.read_text(), page


@pytest.mark.redis
@pytest.mark.parametrize(
    ("form_id", "log_format", "processes", "from_env"),
    [
        pytest.param("user-all-of-them", "text", 1, False, id="text"),
        pytest.param("nouser-quotes", "json", 2, True, id="json-supervisor-env"),
    ],
)
def test_a_worker_process_and_its_metrics_hide_the_secret(
    secret_redis: Any,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    form_id: str,
    log_format: str,
    processes: int,
    from_env: bool,
) -> None:
    form = next(f for f in FORMS if f.id == form_id)
    url = redis_target(secret_redis.port, f"trsec-{uuid.uuid4().hex[:12]}").url(form)
    # Child i of a supervisor serves metrics on this port + i.
    port = free_port_run(processes)
    argv = ["worker", APP, "--metrics-port", str(port), "--log-format", log_format]
    argv += ["--log-level", "debug", "--processes", str(processes)]
    env = {"TASKRUNNER_URL": url} if from_env else {}
    if not from_env:
        argv += ["--url", url]

    out, err, page = worker_process(argv, tmp_path, env=env, started=processes)

    assert_clean(out + err + page, "the worker process")
    assert "taskrunner_" in page
    assert "Traceback" not in err, err
    assert err.count("***") >= processes, err


def test_the_script_runs_on_memory_at_least(run: Cli) -> None:
    """The live checks above are no vacuous truths: memory:// needs no server."""
    target = memory_target()
    form = next(f for f in FORMS if f.id == "user-all-of-them")
    assert target.live(form)
    result = run("inspect", "--app", APP, "--json", "--url", target.url(form))
    assert result.code == 0, result.err
    assert json.loads(result.out)["queues"][0]["url"].startswith("memory://trsecrets:***@")


@pytest.mark.usefixtures("vault_scheme")
@pytest.mark.parametrize("command", [["inspect"], ["worker", APP, "--burst"]])
def test_a_bug_shows_its_traceback_without_the_secret(run: Cli, command: list[str]) -> None:
    url = "vault://user:S3CR%2FET9X@crash?vault_key=S3CR%26ET9X%2Fb64%3D%3D"

    result = run(*command, "--url", url)

    assert result.code == 1
    assert "Traceback" in result.err
    assert "RuntimeError: vault client bug while opening vault://user:***@crash" in result.err
    assert_clean(result.out + result.err, command)


@pytest.mark.parametrize(("target", "form"), cases(REPRESENTATIVE), indirect=["target"])
def test_a_url_from_the_environment_or_a_config_file_stays_hidden(
    run: Cli, target: Target, form: Form, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url = target.url(form)
    commands = [["config"], ["config", "--json"], ["inspect", "--app", APP, "--json"]]
    monkeypatch.setenv("TASKRUNNER_URL", url)
    from_env = [(argv, run(*argv, "--log-level", "debug")) for argv in commands]
    monkeypatch.delenv("TASKRUNNER_URL")
    (tmp_path / "taskrunner.toml").write_text(f"url = {json.dumps(url)}\n")
    from_file = [
        (argv, run(*argv, "--config", "taskrunner.toml", "--log-level", "debug"))
        for argv in commands
    ]

    for argv, result in from_env + from_file:
        check(result, argv)
        if target.live(form):
            assert result.code == 0, (argv, result.err)
            assert "***" in result.out


@pytest.mark.usefixtures("vault_scheme")
def test_a_backend_that_cannot_be_imported_shows_no_secret(run: Cli) -> None:
    url = "broken://user:S3CR%2FET9X@host/?token=S3CR%26ET9X"

    shown = run("config", "--url", url)
    opened = run("inspect", "--url", url)

    # config never opens the URL; inspect does, and reports the bug with its traceback.
    assert shown.code == 0, shown.err
    assert opened.code == 1
    assert "RuntimeError: the broken backend cannot be imported" in opened.err
    for result in (shown, opened):
        assert_clean(result.out + result.err, url)


@pytest.mark.redis
def test_the_lines_of_a_worker_whose_server_went_away_hide_the_secret(tmp_path: Path) -> None:
    import redis

    from tests.redis_fixtures import _server_kind
    from tests.servers import RedisServer, find_server_binary

    server = RedisServer(find_server_binary(_server_kind()))
    server.start()
    try:
        client = redis.Redis(host="127.0.0.1", port=server.port)
        grant(client, REDIS_USER)
        client.close()
        form = next(f for f in FORMS if f.id == "user-all-of-them")
        url = redis_target(server.port, "trsec-away").url(form)
        argv = ["worker", APP, "--url", url, "--block-seconds", "0.1", "--log-level", "debug"]
        err = tmp_path / "err.txt"
        with err.open("w") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "taskrunner", *argv],
                stdout=stderr,
                stderr=stderr,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
                cwd=tmp_path,
                text=True,
            )
        try:
            _wait_for(err, lambda text: "" if "worker for" in text else None, process)
            server.stop(kill=True)
            _wait_for(err, lambda text: "" if "receive failed" in text else None, process)
        finally:
            _stop(process)
    finally:
        server.cleanup()

    assert_clean(err.read_text(), "the worker whose server went away")


@pytest.mark.usefixtures("vault_scheme")
def test_a_misplaced_url_of_a_third_party_backend_is_masked_in_the_usage_error(
    run: Cli,
) -> None:
    # Refused before any setting is read: the backend is imported for the word itself.
    result = run("demo", "vault://store?vault_key=S3CR%2FET9X")

    assert result.code == 2
    assert "vault_key=***" in result.err
    assert_clean(result.err, "the usage error")
