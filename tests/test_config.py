"""Every configuration rule, and the message that names it."""

from __future__ import annotations

from typing import Any

import pytest

from taskrunner import App, ConfigurationError, RunnerConfig, TuningConfig


@pytest.mark.parametrize(
    ("settings", "setting", "message"),
    [
        ({"num_workers": 0}, "num_workers", "num_workers=0 must be >= 1"),
        ({"num_workers": 2.5}, "num_workers", "num_workers=2.5 must be an integer"),
        ({"num_workers": True}, "num_workers", "num_workers=True must be an integer"),
        ({"num_fetchers": 0}, "num_fetchers", "num_fetchers=0 must be between 1 and 64"),
        ({"num_fetchers": 65, "num_workers": 100}, "num_fetchers", "between 1 and 64"),
        (
            {"num_fetchers": 4, "num_workers": 2},
            "num_fetchers",
            "num_fetchers=4 must be <= num_workers=2",
        ),
        ({"batch_size": 0}, "batch_size", "batch_size=0 must be >= 1"),
        ({"block_seconds": 0}, "block_seconds", "block_seconds=0 must be > 0"),
        ({"block_seconds": float("nan")}, "block_seconds", "must be a number of seconds"),
        ({"lease_seconds": -1}, "lease_seconds", "lease_seconds=-1 must be > 0"),
        ({"lease_seconds": float("inf")}, "lease_seconds", "lease_seconds=inf must be finite"),
        (
            {"lease_seconds": 30, "heartbeat_interval_seconds": 15},
            "heartbeat_interval_seconds",
            "heartbeat_interval_seconds=15 must be at most lease_seconds/3 = 10",
        ),
        (
            {"heartbeat_interval_seconds": 0},
            "heartbeat_interval_seconds",
            "heartbeat_interval_seconds=0 must be > 0",
        ),
        (
            {"lease_seconds": 30, "reclaim_interval_seconds": 31},
            "reclaim_interval_seconds",
            "reclaim_interval_seconds=31 must be at most lease_seconds=30",
        ),
        ({"max_retries": -1}, "max_retries", "max_retries=-1 must be >= 0"),
        ({"timeout_seconds": 0}, "timeout_seconds", "timeout_seconds=0 must be > 0"),
        ({"retry_base_seconds": 0}, "retry_base_seconds", "retry_base_seconds=0 must be > 0"),
        (
            {"retry_base_seconds": 10, "retry_max_seconds": 5},
            "retry_max_seconds",
            "retry_max_seconds=5 must be >= retry_base_seconds=10",
        ),
        ({"drain_timeout_seconds": -1}, "drain_timeout_seconds", "must be >= 0"),
        ({"failed_task_handler": 3}, "failed_task_handler", "must be callable or None"),
        (
            {"long_queue_threshold_seconds": 5},
            "long_queue_hook",
            "long_queue_hook and long_queue_threshold_seconds must be set together",
        ),
        ({"consumer_prefix": ""}, "consumer_prefix", "must be 1-100 printable characters"),
        ({"tuning": {"min_workers": 1}}, "tuning", "tuning must be a TuningConfig or None"),
    ],
)
def test_runner_config_rejects_bad_values_naming_value_and_rule(
    settings: dict[str, Any], setting: str, message: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        RunnerConfig(**settings)

    assert message in str(caught.value)
    assert caught.value.setting == setting


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"min_workers": 0, "max_workers": 4, "desired_wait_seconds": 1}, "min_workers=0"),
        (
            {"min_workers": 5, "max_workers": 4, "desired_wait_seconds": 1},
            "min_workers=5 must be <= max_workers=4",
        ),
        ({"min_workers": 1, "max_workers": 4, "desired_wait_seconds": 0}, "must be > 0"),
        (
            {
                "min_workers": 1,
                "max_workers": 4,
                "desired_wait_seconds": 1,
                "wait_tolerance_seconds": -1,
            },
            "wait_tolerance_seconds=-1 must be >= 0",
        ),
        (
            {"min_workers": 1, "max_workers": 4, "desired_wait_seconds": 1, "cooldown_seconds": -1},
            "cooldown_seconds=-1 must be >= 0",
        ),
    ],
)
def test_tuning_config_rejects_bad_values(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TuningConfig(**settings)


def test_defaults_are_valid_and_derived_intervals_sit_inside_the_lease() -> None:
    config = RunnerConfig(lease_seconds=40)

    assert config.heartbeat_interval_seconds == 10
    assert config.reclaim_interval_seconds == 10
    assert config.initial_workers == 50


def test_tuning_mode_starts_inside_the_band_and_cooldown_zero_is_allowed() -> None:
    tuning = TuningConfig(min_workers=2, max_workers=8, desired_wait_seconds=1, cooldown_seconds=0)
    config = RunnerConfig(num_workers=50, tuning=tuning)

    assert config.initial_workers == 8
    assert config.most_workers == 8
    assert tuning.cooldown_seconds == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"queue": "has space"}, "queue name 'has space' must be 1-100 characters"),
        ({"queue": "{tag}"}, "queue name '{tag}'"),
        ({"max_message_bytes": 0}, "max_message_bytes=0 must be >= 1"),
    ],
)
def test_app_rejects_bad_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        App(**kwargs)


def test_task_definitions_are_checked() -> None:
    app = App()

    with pytest.raises(ConfigurationError, match="max_retries=-1 must be >= 0"):

        @app.task(max_retries=-1)
        async def a() -> None: ...

    with pytest.raises(ConfigurationError, match="timeout_seconds=0 must be > 0"):

        @app.task(timeout_seconds=0)
        async def b() -> None: ...

    with pytest.raises(ConfigurationError, match="task name 'two words'"):

        @app.task(name="two words")
        async def c() -> None: ...

    with pytest.raises(TypeError, match="takes at most one required argument"):

        @app.task  # type: ignore[arg-type]
        async def d(x: int, y: int) -> None: ...

    @app.task(name="same")
    async def e() -> None: ...

    with pytest.raises(ConfigurationError, match="a task named 'same' is already registered"):

        @app.task(name="same")
        async def f() -> None: ...


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_retries": 1.5}, r"max_retries=1.5 must be a whole number .*not float"),
        ({"max_retries": 2.0}, r"max_retries=2.0 must be a whole number"),
        ({"max_retries": True}, r"max_retries=True must be a whole number .*not bool"),
        ({"max_retries": "3"}, r"max_retries='3' must be a whole number .*not str"),
        ({"timeout_seconds": True}, r"timeout_seconds=True must be a finite number"),
        ({"timeout_seconds": "5"}, r"timeout_seconds='5' must be a finite number"),
        ({"timeout_seconds": float("inf")}, r"timeout_seconds=inf must be a finite number"),
        ({"unique_for": True}, r"unique_for=True must be a positive number"),
        ({"result_ttl": False}, r"result_ttl=False must be a positive number"),
    ],
)
def test_numeric_task_options_of_the_wrong_kind_are_refused(
    options: dict[str, Any], message: str
) -> None:
    app = App()

    with pytest.raises(ConfigurationError, match=message):
        app.task(**options)(lambda: None)


@pytest.mark.parametrize("value", [1.5, 1024.0, True, "1024"])
def test_max_message_bytes_must_be_an_int(value: object) -> None:
    with pytest.raises(ConfigurationError, match=r"max_message_bytes=.* must be a whole number"):
        App(max_message_bytes=value)  # type: ignore[arg-type]


def test_whole_numbers_are_still_accepted() -> None:
    app = App(max_message_bytes=2048)
    task = app.task(max_retries=0, timeout_seconds=2)(lambda: None)

    assert (task.max_retries, task.timeout_seconds, app.max_message_bytes) == (0, 2, 2048)


@pytest.mark.parametrize("end", ["\n", "\r\n", "\t", " "])
def test_a_name_with_trailing_white_space_is_refused(end: str) -> None:
    # A pattern checked with re.match and "$" accepts "emails\n" ("$" matches before a
    # trailing newline): every name is checked whole.
    with pytest.raises(ConfigurationError, match="queue name"):
        App(f"emails{end}")
    app = App()
    with pytest.raises(ConfigurationError, match="task name"):

        @app.task(name=f"send{end}")
        async def send() -> None: ...

    @app.task(name="tick")
    async def tick() -> None: ...

    with pytest.raises(ConfigurationError, match="schedule name"):
        app.schedule(f"hourly{end}", "tick", every=3600)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"consumer_prefix": 5}, "consumer_prefix=5 must be 1-100 printable characters"),
        ({"consumer_prefix": b"x"}, "consumer_prefix=b'x' must be 1-100 printable characters"),
        ({"lease_seconds": 10**400}, "lease_seconds=1000"),
    ],
)
def test_values_of_the_wrong_kind_are_configuration_errors_too(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RunnerConfig(**settings)
