"""Settings: sources, precedence, and every error message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from taskrunner import ConfigurationError, TuningConfig
from taskrunner.settings import KEYS, env_name, flag_name, load_settings


def load(tmp_path: Path, **kwargs: Any) -> Any:
    kwargs.setdefault("environ", {})
    kwargs.setdefault("cwd", tmp_path)
    return load_settings(**kwargs)


def test_settings_default_to_memory_and_runner_defaults_when_nothing_is_configured(
    tmp_path: Path,
) -> None:
    settings = load(tmp_path)

    assert settings.url == "memory://"
    assert settings.app is None
    assert settings.log_level == "info"
    assert settings.runner.num_workers == 50
    assert settings.runner.tuning is None
    assert settings.config_file is None
    assert settings.source_of("url") == "default"


def test_settings_precedence_is_file_then_environment_then_overrides(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.taskrunner]\nnum_workers = 4\nnum_fetchers = 2\nbatch_size = 3\n"
    )
    environ = {"TASKRUNNER_NUM_FETCHERS": "3", "TASKRUNNER_BATCH_SIZE": "5"}

    settings = load(tmp_path, environ=environ, overrides={"batch_size": 7})

    assert (settings.runner.num_workers, settings.runner.num_fetchers) == (4, 3)
    assert settings.runner.batch_size == 7
    assert settings.source_of("num_workers") == f"{tmp_path / 'pyproject.toml'} [tool.taskrunner]"
    assert settings.source_of("num_fetchers") == "environment variable TASKRUNNER_NUM_FETCHERS"
    assert settings.source_of("batch_size") == "code"
    assert settings.config_file == tmp_path / "pyproject.toml"


def test_settings_ignore_a_pyproject_without_a_taskrunner_table(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')

    settings = load(tmp_path)

    assert settings.runner.num_workers == 50
    assert settings.config_file is None


@pytest.mark.parametrize(
    "text",
    [
        "num_workers = 6\n",
        "[taskrunner]\nnum_workers = 6\n",
        "[tool.taskrunner]\nnum_workers = 6\n",
    ],
    ids=["top-level", "taskrunner-table", "tool-table"],
)
def test_settings_read_a_config_file_in_every_accepted_layout(tmp_path: Path, text: str) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(text)

    assert load(tmp_path, config_file=path).runner.num_workers == 6
    assert load(tmp_path, environ={"TASKRUNNER_CONFIG": str(path)}).runner.num_workers == 6


def test_settings_config_file_replaces_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.taskrunner]\nnum_workers = 4\n")
    (tmp_path / "other.toml").write_text("batch_size = 2\n")

    settings = load(tmp_path, config_file=tmp_path / "other.toml")

    assert (settings.runner.num_workers, settings.runner.batch_size) == (50, 2)


def test_settings_convert_text_from_environment_for_every_kind(tmp_path: Path) -> None:
    environ = {
        "TASKRUNNER_URL": "redis://127.0.0.1:6379/0",
        "TASKRUNNER_APP": "pkg.tasks:app",
        "TASKRUNNER_LEASE_SECONDS": " 30 ",
        "TASKRUNNER_TIMEOUT_SECONDS": "none",
        "TASKRUNNER_HEARTBEAT_INTERVAL_SECONDS": "5.5",
        "TASKRUNNER_LOG_LEVEL": "DEBUG",
        "TASKRUNNER_LOG_FORMAT": "json",
        "TASKRUNNER_METRICS_PORT": "9464",
        "TASKRUNNER_CONSUMER_PREFIX": "blue",
        # Empty means unset; test-suite variables are not settings.
        "TASKRUNNER_NUM_WORKERS": "",
        "TASKRUNNER_TEST_REDIS_URL": "redis://elsewhere",
        "TASKRUNNER_CONFORMANCE_EFFORT": "3",
    }

    settings = load(tmp_path, environ=environ)

    assert settings.url == "redis://127.0.0.1:6379/0"
    assert settings.app == "pkg.tasks:app"
    assert settings.runner.lease_seconds == 30.0
    assert settings.runner.timeout_seconds is None
    assert settings.runner.heartbeat_interval_seconds == 5.5
    assert (settings.log_level, settings.log_format) == ("debug", "json")
    assert settings.metrics_port == 9464
    assert settings.runner.consumer_prefix == "blue"
    assert settings.runner.num_workers == 50


def test_settings_build_tuning_config_from_flat_keys(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.taskrunner]\nmin_workers = 2\nmax_workers = 20\ndesired_wait_seconds = 1.5\n"
        "cooldown_seconds = 0\n"
    )

    settings = load(tmp_path)

    assert settings.runner.tuning == TuningConfig(
        min_workers=2, max_workers=20, desired_wait_seconds=1.5, cooldown_seconds=0
    )


def test_settings_describe_lists_every_key_and_masks_the_url_password(tmp_path: Path) -> None:
    settings = load(tmp_path, overrides={"url": "redis://user:s3cret@host:6379/0"})

    rows = {key: (value, source) for key, value, source in settings.describe()}

    assert set(rows) == {key.name for key in KEYS}
    assert rows["url"] == ("redis://user:***@host:6379/0", "code")
    assert rows["heartbeat_interval_seconds"] == ("15", "default")


def test_configuration_docs_describe_every_setting() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()

    missing = [key.name for key in KEYS if f"| `{key.name}` |" not in docs]

    assert missing == []


def test_flag_and_variable_names_derive_from_the_key() -> None:
    assert flag_name("num_workers") == "--num-workers"
    assert env_name("num_workers") == "TASKRUNNER_NUM_WORKERS"


FILE = "FILE"  # replaced by the path of the file a case writes


@pytest.mark.parametrize(
    ("source", "message"),
    [
        # Unknown keys, by name, with a suggestion and the known list.
        (
            {"env": {"TASKRUNNER_NUM_WORKER": "3"}},
            "unknown setting in the environment: TASKRUNNER_NUM_WORKER (did you mean "
            "TASKRUNNER_NUM_WORKERS?); known settings: TASKRUNNER_URL, TASKRUNNER_APP,",
        ),
        (
            {"pyproject": "[tool.taskrunner]\nleese_seconds = 3\n"},
            "unknown setting in FILE [tool.taskrunner]: leese_seconds (did you mean "
            "lease_seconds?); known settings: url, app, num_fetchers,",
        ),
        (
            {"file": "colour = 'blue'\nnum_workerz = 1\n"},
            "unknown settings in FILE: colour, num_workerz (did you mean num_workers?)",
        ),
        (
            {"overrides": {"workers": 3}},
            "unknown setting in code: workers (did you mean num_workers?)",
        ),
        # Conversion errors name the source, the key and the value.
        (
            {"env": {"TASKRUNNER_NUM_WORKERS": "ten"}},
            "environment variable TASKRUNNER_NUM_WORKERS: num_workers='ten' must be an integer",
        ),
        (
            {"pyproject": "[tool.taskrunner]\nnum_workers = 2.5\n"},
            "FILE [tool.taskrunner]: num_workers=2.5 must be an integer",
        ),
        (
            {"pyproject": "[tool.taskrunner]\nnum_workers = true\n"},
            "FILE [tool.taskrunner]: num_workers=True must be an integer",
        ),
        (
            {"env": {"TASKRUNNER_LEASE_SECONDS": "1m"}},
            "environment variable TASKRUNNER_LEASE_SECONDS: lease_seconds='1m' must be a "
            "number of seconds",
        ),
        (
            {"env": {"TASKRUNNER_LEASE_SECONDS": "inf"}},
            "lease_seconds='inf' must be a finite number of seconds",
        ),
        (
            {"file": "lease_seconds = [1]\n"},
            "FILE: lease_seconds=[1] must be a number of seconds",
        ),
        (
            {"env": {"TASKRUNNER_LOG_LEVEL": "loud"}},
            "log_level='loud' must be one of debug, info, warning, error, critical",
        ),
        (
            {"env": {"TASKRUNNER_LOG_FORMAT": "xml"}},
            "log_format='xml' must be one of text, json",
        ),
        (
            {"env": {"TASKRUNNER_METRICS_PORT": "70000"}},
            "metrics_port='70000' must be a TCP port between 1 and 65535",
        ),
        ({"file": "app = 3\n"}, "FILE: app=3 must be a string"),
        (
            {"env": {"TASKRUNNER_APP": "pkg.tasks"}},
            "app='pkg.tasks' must be MODULE:ATTRIBUTE, e.g. myproject.tasks:app",
        ),
        ({"file": "consumer_prefix = ''\n"}, "FILE: consumer_prefix='' must not be empty"),
        (
            {"env": {"TASKRUNNER_URL": "reddis://127.0.0.1"}},
            "environment variable TASKRUNNER_URL: no backend for URL scheme 'reddis' in "
            "'reddis://127.0.0.1'; did you mean redis://? known schemes: memory, postgres,",
        ),
        (
            {"env": {"TASKRUNNER_URL": "127.0.0.1:6379"}},
            "backend URL '127.0.0.1:6379' has no scheme",
        ),
        # Values that convert but break a rule: the rule, plus where the value came from.
        (
            {"env": {"TASKRUNNER_NUM_WORKERS": "0"}},
            "num_workers=0 must be >= 1 (from environment variable TASKRUNNER_NUM_WORKERS)",
        ),
        (
            {
                "pyproject": "[tool.taskrunner]\nlease_seconds = 30\n"
                "heartbeat_interval_seconds = 15\n"
            },
            "heartbeat_interval_seconds=15.0 must be at most lease_seconds/3 = 10, so a "
            "heartbeat always lands well before the lease lapses (from FILE [tool.taskrunner])",
        ),
        (
            {"env": {"TASKRUNNER_NUM_FETCHERS": "4", "TASKRUNNER_NUM_WORKERS": "2"}},
            "num_fetchers=4 must be <= num_workers=2: a fetcher only leases what a free "
            "worker can start (from environment variable TASKRUNNER_NUM_FETCHERS)",
        ),
        (
            {"env": {"TASKRUNNER_MIN_WORKERS": "2"}},
            "tuning mode needs min_workers, max_workers and desired_wait_seconds; min_workers "
            "(from environment variable TASKRUNNER_MIN_WORKERS) set, but not max_workers, "
            "desired_wait_seconds",
        ),
        (
            {
                "env": {
                    "TASKRUNNER_MIN_WORKERS": "5",
                    "TASKRUNNER_MAX_WORKERS": "2",
                    "TASKRUNNER_DESIRED_WAIT_SECONDS": "1",
                }
            },
            "min_workers=5 must be <= max_workers=2 (from environment variable "
            "TASKRUNNER_MIN_WORKERS)",
        ),
        (
            {
                "env": {
                    "TASKRUNNER_MIN_WORKERS": "1",
                    "TASKRUNNER_MAX_WORKERS": "2",
                    "TASKRUNNER_DESIRED_WAIT_SECONDS": "1",
                    "TASKRUNNER_COOLDOWN_SECONDS": "-1",
                }
            },
            "cooldown_seconds=-1.0 must be >= 0 (from environment variable "
            "TASKRUNNER_COOLDOWN_SECONDS)",
        ),
        # Files.
        (
            {"config": "missing.toml"},
            "config file 'FILE' (from --config) does not exist",
        ),
        ({"file": "num_workers = \n"}, "config file 'FILE' (from --config) is not valid TOML:"),
        ({"file": "taskrunner = 3\n"}, "FILE [taskrunner] must be a table of settings"),
        (
            {"file": "num_workers = 2\nnum-workers = 3\n"},
            "FILE: write num_workers, not num-workers: settings are spelt with underscores",
        ),
    ],
)
def test_settings_error_messages_name_the_key_the_source_and_the_rule(
    tmp_path: Path, source: dict[str, Any], message: str
) -> None:
    kwargs: dict[str, Any] = {"environ": source.get("env", {}), "cwd": tmp_path}
    path = tmp_path / "pyproject.toml"
    if "pyproject" in source:
        path.write_text(source["pyproject"])
    if "file" in source:
        path = tmp_path / "settings.toml"
        path.write_text(source["file"])
        kwargs["config_file"] = path
    if "config" in source:
        path = tmp_path / source["config"]
        kwargs["config_file"] = path
    if "overrides" in source:
        kwargs["overrides"] = source["overrides"]

    with pytest.raises(ConfigurationError) as caught:
        load_settings(**kwargs)

    assert message.replace(FILE, str(path)) in str(caught.value)
