"""The command line in-process, on the memory backend."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path
from typing import cast

import pytest

from taskrunner import App, WorkerInfo, open_queue
from taskrunner.cli import load_app
from taskrunner.errors import ConfigurationError
from taskrunner_backends.memory import InMemoryQueue
from tests.cli.apps import QUEUE, Greeting
from tests.cli.conftest import Cli, queue_len, seed

APP = "tests.cli.apps:app"


def test_help_lists_the_commands_and_exit_codes(run: Cli) -> None:
    result = run("--help")

    assert result.code == 0
    for command in ("worker", "enqueue", "inspect", "dead-letters", "demo", "config"):
        assert command in result.out
    assert "Exit codes: 0 success, 1 backend failure" in result.out


def test_burst_worker_then_inspect_shows_an_empty_queue(run: Cli, memory_url: str) -> None:
    seed(memory_url, "cli.greet", [Greeting("ada"), Greeting("grace"), Greeting("edsger")])

    before = run("inspect", "--app", APP, "--url", memory_url, "--json")
    worker = run("worker", APP, "--url", memory_url, "--burst", "--num-workers", "2")
    after = run("inspect", "--app", APP, "--url", memory_url, "--json")

    assert before.json()["queues"][0]["ready"] == 3
    assert worker.code == 0
    assert "worker started: queue 'cli-tests', 1 fetcher(s), 2 worker(s)" in worker.err
    assert "memory:// lives in this process" in worker.err
    report = after.json()["queues"][0]
    assert (report["queue"], report["ready"], report["in_flight"], report["dead"]) == (
        QUEUE,
        0,
        0,
        0,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["enqueue", "cli.noop", "--app", APP],
        ["enqueue", "cli.greet", "--app", APP, "--payload", '{"name": "a"}'],
        ["enqueue", "cli.greet", "--queue", "q", "--payload", '{"name": "a"}'],
    ],
)
def test_enqueue_to_memory_is_refused_since_the_message_would_die_with_the_process(
    run: Cli, memory_url: str, argv: list[str]
) -> None:
    result = run(*argv, "--url", memory_url)

    assert result.code == 2
    assert result.out == ""
    assert (
        "taskrunner: enqueue: memory:// lives in this process, so the messages would be "
        "gone when this command exits; give a shared backend with --url or TASKRUNNER_URL, "
        "e.g. redis://127.0.0.1:6379/0"
    ) in result.err
    assert queue_len(memory_url) == 0


def test_enqueue_without_a_payload_says_it_is_missing_and_its_type(run: Cli) -> None:
    result = run("enqueue", "cli.greet", "--app", APP, "--url", DOWN)

    assert result.code == 2
    assert (
        "task 'cli.greet' takes a payload (Greeting) and none was given: pass it with "
        "--payload JSON"
    ) in result.err
    assert "null" not in result.err


@pytest.mark.parametrize(
    "argv",
    [
        ["enqueue", "cli.greet", "--json", '{"name": "a"}'],
        ["enqueue", "cli.greet", "--app", APP, "--json", "[1, 2]"],
        ["enqueue", "cli.noop", "--json=null"],
        ["enqueue", "cli.greet", "--json", '"text"'],
    ],
)
def test_the_old_enqueue_json_payload_flag_is_refused_naming_payload(
    run: Cli, argv: list[str]
) -> None:
    result = run(*argv, "--url", DOWN)

    assert result.code == 2
    assert (
        "enqueue: --json is the output format (as in every command); give the payload "
        "with --payload JSON"
    ) in result.err


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect"],
        ["inspect", "--json"],
        ["dead-letters", "list"],
        ["dead-letters", "show", "1-0"],
        ["dead-letters", "retry", "--all"],
        ["dead-letters", "purge", "--all", "--yes"],
    ],
)
def test_without_app_or_queue_the_commands_say_they_show_queue_default(
    run: Cli, memory_url: str, argv: list[str]
) -> None:
    result = run(*argv, "--url", memory_url)

    assert (
        "taskrunner: note: no App given: working on queue 'default' (choose one with "
        "--queue NAME, or give the App as MODULE:APP or --app)"
    ) in result.err
    assert "note" not in result.out


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "--app", APP],
        ["inspect", APP],
        ["inspect", "--queue", "default"],
        ["dead-letters", "list", "--queue", "default"],
    ],
)
def test_no_default_queue_note_when_the_queue_is_chosen(
    run: Cli, memory_url: str, argv: list[str]
) -> None:
    result = run(*argv, "--url", memory_url)

    assert result.code == 0
    assert "note" not in result.err


def test_the_worker_logs_each_success_at_debug_with_its_duration(run: Cli, memory_url: str) -> None:
    seed(memory_url, "cli.greet", [Greeting("ada")])

    quiet = run("worker", APP, "--url", memory_url, "--burst")
    seed(memory_url, "cli.greet", [Greeting("grace")])
    verbose = run("worker", APP, "--url", memory_url, "--burst", "--log-level", "debug")
    seed(memory_url, "cli.greet", [Greeting("edsger")])
    as_json = run(
        "worker",
        APP,
        "--url",
        memory_url,
        "--burst",
        "--log-level",
        "debug",
        "--log-format",
        "json",
    )

    assert "attempt succeeded" not in quiet.err
    [line] = [line for line in verbose.err.splitlines() if "attempt succeeded" in line]
    assert re.search(r"DEBUG taskrunner\.attempts: attempt succeeded .*task=cli\.greet ", line)
    words = line.split()
    assert "outcome=succeeded" in words
    assert "delivery_count=1" in words
    assert any(re.fullmatch(r"duration_seconds=\d[\d.e-]*", word) for word in words)
    assert any(re.fullmatch(r"latency_seconds=\d[\d.e-]*", word) for word in words)
    assert "message_id=" in line
    documents = [json.loads(line) for line in as_json.err.splitlines()]
    [success] = [d for d in documents if d["message"] == "attempt succeeded"]
    assert (success["level"], success["logger"]) == ("DEBUG", "taskrunner.attempts")
    assert (success["task"], success["outcome"], success["delivery_count"]) == (
        "cli.greet",
        "succeeded",
        1,
    )
    assert isinstance(success["duration_seconds"], float)
    assert isinstance(success["latency_seconds"], float)
    assert success["error"] is None


def test_the_worker_logs_a_failed_attempt_at_info_with_its_error(run: Cli, memory_url: str) -> None:
    seed(memory_url, "cli.fail", [Greeting("edsger")])

    as_json = run("worker", APP, "--url", memory_url, "--burst", "--log-format", "json")

    documents = [json.loads(line) for line in as_json.err.splitlines()]
    [failed] = [d for d in documents if d["logger"] == "taskrunner.attempts"]
    assert failed["level"] == "INFO"
    assert failed["task"] == "cli.fail"
    assert failed["outcome"] == "dead_lettered"
    assert failed["error"] == "RuntimeError: cannot greet edsger"


def test_the_worker_stop_line_has_structured_fields(run: Cli, memory_url: str) -> None:
    seed(memory_url, "cli.greet", [Greeting("ada"), Greeting("grace")])
    seed(memory_url, "cli.fail", [Greeting("edsger")])

    text = run("worker", APP, "--url", memory_url, "--burst")
    seed(memory_url, "cli.greet", [Greeting("ada")])
    as_json = run("worker", APP, "--url", memory_url, "--burst", "--log-format", "json")

    [line] = [line for line in text.err.splitlines() if "worker stopped" in line]
    assert "RunnerStats(" not in line
    fields = dict(word.split("=", 1) for word in line.split("worker stopped", 1)[1].split())
    assert (fields["received"], fields["succeeded"], fields["dead_lettered"]) == ("3", "2", "1")
    assert fields["in_flight"] == "0"
    documents = [json.loads(line) for line in as_json.err.splitlines()]
    [stopped] = [d for d in documents if d["message"] == "worker stopped"]
    assert (stopped["received"], stopped["succeeded"], stopped["failed"]) == (1, 1, 0)
    assert stopped["level"] == "INFO"


def test_dead_letters_list_show_retry_and_purge_on_memory(run: Cli, memory_url: str) -> None:
    common = ("--app", APP, "--url", memory_url)
    seed(memory_url, "cli.fail", [Greeting(name) for name in ("ada", "grace", "edsger")])
    assert run("worker", APP, "--url", memory_url, "--burst").code == 0

    listed = run("dead-letters", "list", *common)
    ids = [
        letter["id"]
        for letter in run("dead-letters", "list", *common, "--json").json()["dead_letters"]
    ]
    shown = run("dead-letters", "show", ids[0], *common)
    retried = run("dead-letters", "retry", ids[0], *common)
    unconfirmed = run("dead-letters", "purge", "--all", *common)
    purged = run("dead-letters", "purge", "--all", "--yes", *common)
    report = run("inspect", *common, "--json").json()["queues"][0]

    assert listed.code == 0
    assert "cli.fail" in listed.out
    assert "attempt 1 of 1 failed: RuntimeError: cannot greet ada" in listed.out
    assert len(ids) == 3
    assert shown.code == 0
    assert "reason       attempt 1 of 1 failed: RuntimeError: cannot greet ada" in shown.out
    assert 'payload:\n{\n  "name": "ada"\n}' in shown.out
    assert retried.code == 0
    assert "retried 1 dead letter(s) onto queue 'cli-tests'" in retried.out
    assert unconfirmed.code == 2
    assert "pass --yes to confirm" in unconfirmed.err
    assert purged.code == 0
    assert "purged 2 dead letter(s)" in purged.out
    assert (report["ready"], report["dead"]) == (1, 0)


def test_dead_letters_show_and_retry_of_an_unknown_id_exit_1(run: Cli, memory_url: str) -> None:
    common = ("--app", APP, "--url", memory_url)

    shown = run("dead-letters", "show", "dead-404", *common)
    retried = run("dead-letters", "retry", "dead-404", *common)
    purged = run("dead-letters", "purge", "dead-404", "--yes", *common)

    assert shown.code == retried.code == purged.code == 1
    assert "no dead letter 'dead-404' on queue 'cli-tests'" in shown.err
    assert "1 of 1 id(s) were not dead letters" in retried.err
    assert "1 of 1 id(s) were not dead letters" in purged.err


def test_dead_letters_show_prints_the_raw_bytes_of_a_body_that_is_no_envelope(
    run: Cli, memory_url: str
) -> None:
    async def bury() -> str:
        async with open_queue(memory_url, QUEUE) as queue:
            await queue.add([b"\xffnot json"])
            [delivery] = await queue.receive("c", max_messages=1, wait_seconds=0, lease_seconds=60)
            await queue.dead_letter([delivery], reason="malformed")
            return cast(InMemoryQueue, queue).dead_letters()[0].message_id

    dead_id = asyncio.run(bury())
    result = run("dead-letters", "show", dead_id, "--app", APP, "--url", memory_url)
    as_json = run("dead-letters", "show", dead_id, "--app", APP, "--url", memory_url, "--json")

    assert result.code == 0
    assert "body (not a taskrunner message):\nb'\\xffnot json'" in result.out
    assert as_json.json()["envelope"] is None
    assert as_json.json()["body_base64"] == "/25vdCBqc29u"


def test_inspect_predicts_the_wait_from_the_worker_registry(run: Cli, memory_url: str) -> None:
    async def arrange() -> None:
        async with open_queue(memory_url, "busy") as queue:
            await queue.add([b"x"] * 40)
            registry = cast(InMemoryQueue, queue)
            for instance, workers, seconds in (("a", 10, 0.5), ("b", 30, 1.5)):
                info = WorkerInfo(
                    instance=instance,
                    workers=workers,
                    busy=workers,
                    average_seconds=seconds,
                    seen_at=0.0,
                )
                await registry.publish_worker(info, ttl_seconds=600)

    asyncio.run(arrange())
    result = run("inspect", "--queue", "busy", "--url", memory_url, "--json")
    table = run("inspect", "--queue", "busy", "--queue", "other", "--url", memory_url)

    report = result.json()["queues"][0]
    # Weighted average 1.25 s x 40 ready / 40 workers.
    assert report["predicted_wait_seconds"] == pytest.approx(1.25)
    assert report["workers"] == {
        "processes": 2,
        "workers": 40,
        "busy": 40,
        "average_seconds": 1.25,
    }
    assert "predicted wait  1.2s" in table.out
    assert "workers         40 in 2 process(es), 40 busy, average task 1.2s" in table.out
    assert "queue 'other' on memory://" in table.out


def test_config_shows_each_value_and_its_source(
    run: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.taskrunner]\nnum_workers = 7\n")
    monkeypatch.setenv("TASKRUNNER_URL", "redis://:secret@127.0.0.1:6379/0")

    result = run("config", "--batch-size", "3")
    as_json = run("config", "--json").json()

    assert result.code == 0
    assert f"config file: {tmp_path / 'pyproject.toml'}" in result.out
    lines = {line.split()[0]: line for line in result.out.splitlines()[2:]}
    assert lines["num_workers"].split()[1:] == [
        "7",
        str(tmp_path / "pyproject.toml"),
        "[tool.taskrunner]",
    ]
    assert lines["batch_size"].split()[1:] == ["3", "option", "--batch-size"]
    assert "redis://:***@127.0.0.1:6379/0  environment variable TASKRUNNER_URL" in lines["url"]
    assert "secret" not in result.out
    assert as_json["settings"]["num_workers"] == {
        "value": "7",
        "source": f"{tmp_path / 'pyproject.toml'} [tool.taskrunner]",
    }


def test_worker_reads_app_and_url_from_the_environment(
    run: Cli, memory_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKRUNNER_APP", APP)
    monkeypatch.setenv("TASKRUNNER_URL", memory_url)
    seed(memory_url, "cli.noop", [None])

    result = run("worker", "--burst", "--log-format", "json")

    assert result.code == 0
    assert '"message":"worker started: queue' in result.err
    assert run("inspect", "--json").json()["queues"][0]["ready"] == 0


def test_worker_serves_metrics_when_metrics_port_is_set(run: Cli, memory_url: str) -> None:
    pytest.importorskip("prometheus_client")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    result = run("worker", APP, "--url", memory_url, "--burst", "--metrics-port", str(port))

    assert result.code == 0
    assert f"metrics on http://127.0.0.1:{port}/metrics" in result.err


def test_demo_processes_every_task_and_prints_a_summary(run: Cli, memory_url: str) -> None:
    result = run("demo", "--url", memory_url, "--tasks", "200", "--num-workers", "16")

    assert result.code == 0
    assert "dispatched 200 tasks to 'demo-" in result.out
    summary = result.out[result.out.index("summary") :]
    assert "processed      200" in summary
    # 1 email in 100 always fails (3 attempts); 1 in 10 fails once.
    assert "dead-lettered  1" in summary
    assert "retried        12" in summary
    assert "throughput" in summary


def test_load_app_accepts_a_factory() -> None:
    app = load_app("tests.cli.apps:make_app")

    assert isinstance(app, App)
    assert app.queue == "factory-queue"


def test_load_app_lets_an_import_error_inside_the_module_propagate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_app_module.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_xyz"):
        load_app("broken_app_module:app")


def test_load_app_names_the_apps_of_a_module_when_the_attribute_is_missing() -> None:
    with pytest.raises(ConfigurationError, match="has no attribute 'ap'; App objects in it: app"):
        load_app("tests.cli.apps:ap")


OTHER_APP = "tests.cli.apps:make_app"
DOWN = "redis://127.0.0.1:1/0"


@pytest.mark.parametrize(
    ("argv", "code", "expect"),
    [
        (["worker", "{app}", "--burst"], 0, "worker started: queue 'cli-tests'"),
        (["inspect", "{app}"], 0, "queue 'cli-tests' on memory://"),
        (["config", "{app}", "--json"], 0, '"value": "tests.cli.apps:app"'),
        (["dead-letters", "list", "{app}"], 0, "no dead letters on queue 'cli-tests'"),
        (
            ["dead-letters", "show", "{app}", "dead-404"],
            1,
            "no dead letter 'dead-404' on queue 'cli-tests'",
        ),
        (
            ["dead-letters", "retry", "{app}", "--all"],
            0,
            "retried 0 dead letter(s) onto queue 'cli-tests'",
        ),
        (
            ["dead-letters", "retry", "{app}", "dead-1", "dead-2"],
            1,
            "2 of 2 id(s) were not dead letters of queue 'cli-tests'",
        ),
        (
            ["dead-letters", "purge", "{app}", "--all", "--yes"],
            0,
            "purged 0 dead letter(s) from queue 'cli-tests'",
        ),
        # Validated against the App's task before anything connects.
        (
            ["enqueue", "{app}", "cli.greet", "--payload", '{"nam": 1}'],
            2,
            "task 'cli.greet': payload does not match Greeting",
        ),
    ],
    ids=lambda value: "-".join(value[:2]) if isinstance(value, list) else None,
)
@pytest.mark.parametrize("form", ["positional", "option", "both"])
def test_every_command_takes_the_app_as_argument_or_with_app(
    run: Cli, memory_url: str, argv: list[str], code: int, expect: str, form: str
) -> None:
    words: list[str] = []
    for word in argv:
        if word != "{app}":
            words.append(word)
        elif form == "option":
            words += ["--app", APP]
        else:
            words.append(APP)
    if form == "both":
        # After the arguments: argparse takes no more arguments after an option.
        words += ["--app", APP]

    result = run(*words, "--url", DOWN if argv[0] == "enqueue" else memory_url)

    assert result.code == code, result.err
    assert expect in result.out + result.err, result.err
    assert "Traceback" not in result.err


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", APP, "--app", OTHER_APP, "--burst"],
        ["inspect", APP, "--app", OTHER_APP],
        ["config", OTHER_APP, "--app", APP],
        ["dead-letters", "list", APP, "--app", OTHER_APP],
        ["dead-letters", "show", APP, "1-0", "--app", OTHER_APP],
        ["dead-letters", "purge", APP, "1-0", "--app", OTHER_APP, "--yes"],
        ["enqueue", APP, "cli.noop", "--app", OTHER_APP],
    ],
    ids=lambda argv: "-".join(argv[:2]),
)
def test_the_app_given_twice_with_different_values_is_a_usage_error(
    run: Cli, memory_url: str, argv: list[str]
) -> None:
    result = run(*argv, "--url", memory_url)

    assert result.code == 2
    assert "the App is given twice with different values" in result.err
    assert APP in result.err
    assert OTHER_APP in result.err


def test_dead_letter_ids_are_never_taken_for_the_app(run: Cli, memory_url: str) -> None:
    # Redis ids and memory ids have no MODULE:ATTRIBUTE shape: all of them are ids.
    result = run(
        "dead-letters", "retry", "1714824001234-0", "dead-7", "--app", APP, "--url", memory_url
    )

    assert result.code == 1
    assert "2 of 2 id(s) were not dead letters of queue 'cli-tests'" in result.err
