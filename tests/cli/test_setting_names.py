"""One name per setting: the same in RunnerConfig/TuningConfig, files, variables and flags.

Old names are errors that name the new one (never silent aliases): a config that
still says ``tuning_cooldown_seconds`` must not quietly stop working, nor keep
working under a name the documentation no longer has.
"""

from __future__ import annotations

import argparse
import inspect
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from taskrunner import ConfigurationError, RunnerConfig, TuningConfig
from taskrunner.cli import _parser
from taskrunner.fetcher import Fetcher
from taskrunner.settings import KEYS, load_settings
from tests.cli.conftest import Cli

APP = "tests.cli.apps:app"


def test_every_runner_and_tuning_setting_is_the_field_of_the_same_name() -> None:
    runner_fields = {f.name for f in fields(RunnerConfig)}
    tuning_fields = {f.name for f in fields(TuningConfig)}

    for key in KEYS:
        if key.group == "runner":
            assert key.name in runner_fields, key.name
        elif key.group == "tuning":
            assert key.name in tuning_fields, key.name


def test_runner_config_has_no_second_name_for_a_setting() -> None:
    config = RunnerConfig(lease_seconds=40)
    names = {f.name for f in fields(RunnerConfig)}
    # Public attributes that are not fields: only derived figures, none named like a
    # setting (heartbeat_seconds and reclaim_seconds were second names).
    extra = {
        name
        for name in dir(config)
        if not name.startswith("_") and name not in names and not callable(getattr(config, name))
    }

    assert extra == {"initial_workers", "most_workers"}
    assert config.heartbeat_interval_seconds == 10
    assert config.reclaim_interval_seconds == 10


def test_the_fetcher_calls_the_tuning_cooldown_by_its_name() -> None:
    parameters = inspect.signature(Fetcher).parameters

    assert "cooldown_seconds" in parameters
    assert not [name for name in parameters if "cooldown" in name and name != "cooldown_seconds"]


def setting_flags(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """dest -> option strings of every visible setting flag, subcommands included."""
    found: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                for dest, options in setting_flags(sub).items():
                    found.setdefault(dest, options)
                    assert found[dest] == options, dest
        elif action.dest.startswith("setting:") and action.help != argparse.SUPPRESS:
            found[action.dest] = list(action.option_strings)
    return found


def test_each_setting_flag_is_the_dashed_name_and_nothing_else() -> None:
    flags = setting_flags(_parser())

    assert flags == {f"setting:{key.name}": ["--" + key.name.replace("_", "-")] for key in KEYS}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            {"env": {"TASKRUNNER_TUNING_COOLDOWN_SECONDS": "5"}},
            "the environment: TASKRUNNER_TUNING_COOLDOWN_SECONDS was renamed "
            "TASKRUNNER_COOLDOWN_SECONDS",
        ),
        (
            {"file": "tuning_cooldown_seconds = 5\n"},
            "FILE: tuning_cooldown_seconds was renamed cooldown_seconds",
        ),
        (
            {"overrides": {"tuning_cooldown_seconds": 5}},
            "code: tuning_cooldown_seconds was renamed cooldown_seconds",
        ),
        (
            {"file": "num-workers = 5\n"},
            "FILE: write num_workers, not num-workers: settings are spelt with underscores "
            "in files (dashes only in command-line flags)",
        ),
        (
            {"file": "[tool.taskrunner]\nlease-seconds = 5\n", "name": "pyproject.toml"},
            "write lease_seconds, not lease-seconds",
        ),
    ],
)
def test_old_and_dashed_names_are_errors_naming_the_one_name(
    tmp_path: Path, source: dict[str, Any], message: str
) -> None:
    kwargs: dict[str, Any] = {"environ": source.get("env", {}), "cwd": tmp_path}
    path = tmp_path / source.get("name", "settings.toml")
    if "file" in source:
        path.write_text(source["file"])
        kwargs["config_file"] = path
    if "overrides" in source:
        kwargs["overrides"] = source["overrides"]

    with pytest.raises(ConfigurationError) as caught:
        load_settings(**kwargs)

    assert message.replace("FILE", str(path)) in str(caught.value)


def test_the_cooldown_is_cooldown_seconds_in_every_source(tmp_path: Path) -> None:
    tuning = {"min_workers": "1", "max_workers": "4", "desired_wait_seconds": "1"}
    environ = {f"TASKRUNNER_{k.upper()}": v for k, v in tuning.items()}

    from_env = load_settings(environ={**environ, "TASKRUNNER_COOLDOWN_SECONDS": "3"}, cwd=tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        "[tool.taskrunner]\nmin_workers = 1\nmax_workers = 4\ndesired_wait_seconds = 1\n"
        "cooldown_seconds = 4\n"
    )
    from_file = load_settings(environ={}, cwd=tmp_path)

    assert from_env.runner.tuning is not None
    assert from_env.runner.tuning.cooldown_seconds == 3
    assert from_file.runner.tuning is not None
    assert from_file.runner.tuning.cooldown_seconds == 4
    with pytest.raises(ConfigurationError, match=r"TASKRUNNER_COOLDOWN_SECONDS"):
        load_settings(environ={**environ, "TASKRUNNER_COOLDOWN_SECONDS": "-1"}, cwd=tmp_path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["worker", APP, "--burst", "--workers", "3"], "--workers was renamed --num-workers"),
        (["worker", APP, "--burst", "--fetchers", "2"], "--fetchers was renamed --num-fetchers"),
        (
            ["worker", APP, "--burst", "--tuning-cooldown-seconds", "2"],
            "--tuning-cooldown-seconds was renamed --cooldown-seconds",
        ),
        (["config", "--workers", "3"], "--workers was renamed --num-workers"),
        (["demo", "--workers", "3"], "--workers was renamed --num-workers"),
    ],
)
def test_old_flags_are_usage_errors_naming_the_new_flag(
    run: Cli, argv: list[str], message: str
) -> None:
    result = run(*argv)

    assert result.code == 2
    assert message in result.err


def test_the_demo_takes_num_workers(run: Cli, memory_url: str) -> None:
    result = run("demo", "--url", memory_url, "--tasks", "20", "--num-workers", "4")

    assert result.code == 0, result.err
    assert "processed      20" in result.out
