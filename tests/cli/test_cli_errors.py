"""Every error a user can make on the command line: one line, the right exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Cli

APP = "tests.cli.apps:app"
MEM = "memory://cli-errors"
# enqueue refuses memory://, and checks everything else before it connects.
DOWN = "redis://127.0.0.1:1/0"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        # Usage.
        (["frobnicate"], {}, "argument COMMAND: invalid choice: 'frobnicate'"),
        (
            ["worker", APP, "--num-worker", "3"],
            {},
            "unrecognized arguments: --num-worker 3 (did you mean --num-workers?)",
        ),
        (["worker", APP, "--burst", "--lease"], {}, "unrecognized arguments: --lease"),
        (["worker", "--url", MEM], {}, "worker needs the App to run: taskrunner worker MODULE:APP"),
        (["demo", "--tasks", "0"], {}, "argument --tasks: 0 must be >= 1"),
        (
            ["dead-letters", "retry", "--app", APP, "--url", MEM],
            {},
            "dead-letters retry: give the IDs to retry, or --all",
        ),
        (
            ["dead-letters", "purge", "1", "--all", "--app", APP, "--url", MEM],
            {},
            "dead-letters purge: give IDs or --all, not both",
        ),
        (
            ["dead-letters", "list", "--limit", "0", "--app", APP, "--url", MEM],
            {},
            "--limit 0 must be >= 1",
        ),
        # Settings from flags, the environment and files.
        (
            ["worker", APP, "--num-workers", "ten"],
            {},
            "configuration error: option --num-workers: num_workers='ten' must be an integer",
        ),
        (
            ["worker", APP, "--num-workers", "0"],
            {},
            "configuration error: num_workers=0 must be >= 1 (from option --num-workers)",
        ),
        (
            ["worker", APP, "--lease-seconds", "30", "--reclaim-interval-seconds", "31"],
            {},
            "reclaim_interval_seconds=31.0 must be at most lease_seconds=30, or abandoned "
            "messages wait more than a lease longer than needed (from option "
            "--reclaim-interval-seconds)",
        ),
        (
            ["worker", APP, "--min-workers", "2", "--max-workers", "4"],
            {},
            "tuning mode needs min_workers, max_workers and desired_wait_seconds; "
            "min_workers (from option --min-workers), max_workers (from option --max-workers) "
            "set, but not desired_wait_seconds",
        ),
        (
            ["worker", APP, "--log-level", "loud"],
            {},
            "option --log-level: log_level='loud' must be one of debug, info, warning, error, "
            "critical",
        ),
        (
            ["inspect"],
            {"TASKRUNNER_BACTH_SIZE": "3"},
            "unknown setting in the environment: TASKRUNNER_BACTH_SIZE (did you mean "
            "TASKRUNNER_BATCH_SIZE?)",
        ),
        (
            ["inspect"],
            {"TASKRUNNER_URL": "redis//127.0.0.1"},
            "environment variable TASKRUNNER_URL: backend URL 'redis//127.0.0.1' has '//' "
            "after its scheme instead of '://'; expected 'redis://127.0.0.1'",
        ),
        (
            ["inspect", "--config", "nowhere.toml"],
            {},
            "config file 'nowhere.toml' (from --config) does not exist",
        ),
        (
            ["inspect"],
            {"TASKRUNNER_CONFIG": "nowhere.toml"},
            "config file 'nowhere.toml' (from TASKRUNNER_CONFIG) does not exist",
        ),
        # Backend URLs: the scheme here, the options in each backend.
        (
            ["inspect", "--url", "memroy://"],
            {},
            "option --url: no backend for URL scheme 'memroy' in 'memroy://'; did you mean "
            "memory://?",
        ),
        (
            ["inspect", "--url", "memory://x?requires_hearbeat=false"],
            {},
            "unknown memory:// option(s) requires_hearbeat; known: requires_heartbeat",
        ),
        (
            ["inspect", "--url", "redis://:hunter2@127.0.0.1:1/0?namespce=x"],
            {},
            "unknown option(s) namespce in redis://:***@127.0.0.1:1/0?namespce=x; known: ",
        ),
        # The App.
        (["worker", "tests.cli.apps"], {}, "app='tests.cli.apps' must be MODULE:ATTRIBUTE"),
        (
            ["worker", "tests.cli.nowhere:app"],
            {},
            "argument MODULE:APP: cannot import module 'tests.cli.nowhere' (No module named "
            "'tests.cli.nowhere'); run the command from the directory containing it",
        ),
        (
            ["worker", "tests.cli.apps:ap"],
            {},
            "module 'tests.cli.apps' has no attribute 'ap'; App objects in it: app",
        ),
        (
            ["worker", "tests.cli.apps:not_an_app"],
            {},
            "'tests.cli.apps:not_an_app' is a int, not a taskrunner.App (or a function "
            "returning one)",
        ),
        (
            ["inspect"],
            {"TASKRUNNER_APP": "tests.cli.apps:greet"},
            "environment variable TASKRUNNER_APP: 'tests.cli.apps:greet' is a Task, not a "
            "taskrunner.App",
        ),
        # enqueue.
        (
            ["enqueue", "cli.gret", "--app", APP, "--url", DOWN],
            {},
            "unknown task 'cli.gret' (registered: cli.block, cli.fail, cli.greet, cli.noop, "
            "cli.slow)",
        ),
        (
            ["enqueue", "cli.greet", "--app", APP, "--url", DOWN, "--payload", "{name: 1}"],
            {},
            "--payload: invalid JSON: ",
        ),
        (
            ["enqueue", "cli.greet", "--app", APP, "--url", DOWN, "--payload", '{"nam": "x"}'],
            {},
            "--payload: task 'cli.greet': payload does not match Greeting: Object missing "
            "required field `name`",
        ),
        (
            ["enqueue", "cli.greet", "--app", APP, "--url", DOWN, "--file", "missing.jsonl"],
            {},
            "--file 'missing.jsonl': No such file or directory",
        ),
        (
            ["enqueue", "cli.greet", "--app", APP, "--url", DOWN, "--file", "bad.jsonl"],
            {},
            "bad.jsonl line 2: task 'cli.greet': payload does not match Greeting: Expected "
            "`str`, got `int` - at `$.name`",
        ),
        (
            ["enqueue", "cli.greet", "--app", APP, "--url", DOWN, "--file", "empty.jsonl"],
            {},
            "empty.jsonl: no payloads (expected one JSON value per line)",
        ),
        (
            ["enqueue", "cli.greet", "--app", APP, "--queue", "other", "--url", DOWN],
            {},
            "--queue 'other' differs from the queue of tests.cli.apps:app ('cli-tests')",
        ),
        (
            ["enqueue", "bad name", "--url", DOWN],
            {},
            "task name 'bad name' must be 1-200 characters without spaces or braces",
        ),
    ],
)
def test_cli_errors_print_one_line_and_exit_2(
    run: Cli,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    (tmp_path / "bad.jsonl").write_text('{"name": "a"}\n{"name": 2}\n')
    (tmp_path / "empty.jsonl").write_text("\n\n")
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    result = run(*argv)

    assert result.code == 2, result.err
    assert message in result.err
    assert "Traceback" not in result.err
    assert result.out == ""
    assert "hunter2" not in result.err


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", APP, "--url", "redis://:hunter2@127.0.0.1:1/0"],
        ["inspect", "--url", "redis://:hunter2@127.0.0.1:1/0"],
        ["dead-letters", "list", "--url", "redis://:hunter2@127.0.0.1:1/0"],
        ["enqueue", "cli.noop", "--app", APP, "--url", "redis://:hunter2@127.0.0.1:1/0"],
    ],
    ids=["worker", "inspect", "dead-letters", "enqueue"],
)
def test_cli_exits_1_without_traceback_or_password_when_the_backend_is_unreachable(
    run: Cli, argv: list[str]
) -> None:
    result = run(*argv)

    assert result.code == 1
    # The last line: inspect and dead-letters first note that they use queue 'default'.
    assert result.err.splitlines()[-1].startswith("taskrunner: backend error: ")
    assert "server unavailable" in result.err
    assert "Traceback" not in result.err
    assert "hunter2" not in result.err
