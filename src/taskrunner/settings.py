"""Settings of a worker process, from code, a TOML file, the environment and flags.

Each setting has one name used everywhere: ``num_workers`` is the `RunnerConfig`
field ``num_workers``, ``num_workers`` in a file, ``TASKRUNNER_NUM_WORKERS`` in the
environment and ``--num-workers`` on the command line. Former names (`RENAMED`) and
dashed keys in files are errors naming the one name, never aliases.

Sources, lowest precedence first (a later one wins, key by key):

1. defaults (`RunnerConfig` and `TuningConfig` defaults; ``url`` = ``memory://``);
2. a TOML file: the one ``--config FILE`` or ``TASKRUNNER_CONFIG`` names (top-level
   keys, or a ``[taskrunner]`` or ``[tool.taskrunner]`` table), else
   ``[tool.taskrunner]`` of ``./pyproject.toml`` when there is one;
3. environment variables ``TASKRUNNER_<KEY>`` (an empty value counts as unset);
4. values given in code (`load_settings` ``overrides``) or on the command line.

Unknown keys are rejected by name, with the closest known key suggested, in every
source: a typo never silently does nothing. ``TASKRUNNER_CONFIG`` and the variables
starting with ``TASKRUNNER_TEST_`` or ``TASKRUNNER_CONFORMANCE_`` (reserved for test
suites) are not settings and are ignored here, nor are the secrets read where they are
used (``TASKRUNNER_DASHBOARD_TOKEN`` and ``TASKRUNNER_DASHBOARD_SESSION_HOURS``, by
``taskrunner dashboard``). A value that cannot be converted
names the key, where it came from and the value; a value that converts but breaks a
rule of `RunnerConfig` or `TuningConfig` gets that rule's message plus where it came
from. Every error is a `ConfigurationError`.

Example::

    settings = load_settings({"num_workers": 50})
    async with taskrunner.open_queue(settings.url, app.queue) as queue:
        await taskrunner.Runner(queue, app, settings.runner).run()
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from taskrunner.backends import DEFAULT_URL, check_url
from taskrunner.config import RunnerConfig, TuningConfig
from taskrunner.errors import ConfigurationError
from taskrunner.logs import LOG_FORMATS, LOG_LEVELS
from taskrunner.redaction import mask_url

__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "KEYS",
    "RENAMED",
    "Key",
    "Settings",
    "env_name",
    "flag_name",
    "load_settings",
]

ENV_PREFIX = "TASKRUNNER_"
CONFIG_ENV = "TASKRUNNER_CONFIG"

# Environment variables with these prefixes belong to test suites, not to settings.
_RESERVED_ENV_PREFIXES = ("TASKRUNNER_TEST_", "TASKRUNNER_CONFORMANCE_")
# Read where they are used (by ``taskrunner dashboard``), not settings: settings are
# shown with their values and sources in messages, a token must not be; the session
# time belongs with the token.
_RESERVED_ENV_NAMES = frozenset(
    {"TASKRUNNER_DASHBOARD_TOKEN", "TASKRUNNER_DASHBOARD_SESSION_HOURS"}
)

Kind = Literal["int", "float", "optional_float", "str", "choice", "port", "url", "app"]
Group = Literal["general", "runner", "tuning", "logging"]


@dataclass(frozen=True, slots=True)
class Key:
    """One setting.

    Attributes:
        name: The name in files and code; the flag and the variable derive from it.
        kind: How text is converted and what is accepted.
        group: Where the value goes: general, `RunnerConfig` (runner), `TuningConfig`
            (tuning) or logging.
        help: One line for ``--help`` and the documentation.
        choices: Accepted values of a ``choice`` key.

    A runner or tuning key is the `RunnerConfig` or `TuningConfig` field of the same
    name: one name everywhere.
    """

    name: str
    kind: Kind
    group: Group
    help: str
    choices: tuple[str, ...] = ()


KEYS: tuple[Key, ...] = (
    Key("url", "url", "general", "backend URL, e.g. redis://127.0.0.1:6379/0 (default memory://)"),
    Key("app", "app", "general", "the App to run, as MODULE:ATTRIBUTE"),
    Key("num_fetchers", "int", "runner", "receive loops (1-64; 1-4 is plenty)"),
    Key("num_workers", "int", "runner", "tasks run at once (the pool size)"),
    Key("batch_size", "int", "runner", "most messages per receive"),
    Key("block_seconds", "float", "runner", "how long a receive waits for a first message"),
    Key("lease_seconds", "float", "runner", "a message not heartbeated this long is reclaimed"),
    Key("heartbeat_interval_seconds", "optional_float", "runner", "lease extension period"),
    Key(
        "reclaim_interval_seconds", "optional_float", "runner", "how often lapsed leases are sought"
    ),
    Key("max_retries", "int", "runner", "retries for tasks that set none (0 = none)"),
    Key(
        "timeout_seconds", "optional_float", "runner", "attempt time limit for tasks that set none"
    ),
    Key("retry_base_seconds", "float", "runner", "backoff before the first retry"),
    Key("retry_max_seconds", "float", "runner", "upper bound of the backoff"),
    Key(
        "drain_timeout_seconds", "float", "runner", "at shutdown, how long running tasks may finish"
    ),
    Key("consumer_prefix", "str", "runner", "first part of this process's consumer names"),
    Key(
        "monitor_interval_seconds",
        "float",
        "runner",
        "how often the backlog and worker registry are read",
    ),
    Key("leader_ttl_seconds", "float", "runner", "lease of the schedules' elected leader"),
    Key("min_workers", "int", "tuning", "tuning mode: smallest pool"),
    Key("max_workers", "int", "tuning", "tuning mode: largest pool"),
    Key("desired_wait_seconds", "float", "tuning", "tuning mode: predicted wait to aim for"),
    Key("wait_tolerance_seconds", "float", "tuning", "tuning mode: half-width of the band"),
    Key("cooldown_seconds", "float", "tuning", "tuning mode: least time between two resizes"),
    Key("log_level", "choice", "logging", "log level", choices=LOG_LEVELS),
    Key("log_format", "choice", "logging", "log format: text or json lines", choices=LOG_FORMATS),
    Key("metrics_port", "port", "general", "serve Prometheus metrics on this port"),
    Key("metrics_addr", "str", "general", "interface the metrics port binds (default 127.0.0.1)"),
    Key(
        "outbox_url",
        "url",
        "general",
        "PostgreSQL URL of the database holding the outbox the worker relays (?schema=)",
    ),
)

_BY_NAME = {key.name: key for key in KEYS}

#: Former names of settings, and the one name each has now. Each is an error that
#: names the new one, in every source: never a silent alias.
RENAMED = {"tuning_cooldown_seconds": "cooldown_seconds"}
_TUNING_REQUIRED = ("min_workers", "max_workers", "desired_wait_seconds")
_DEFAULTS: dict[str, Any] = {
    "url": DEFAULT_URL,
    "log_level": "info",
    "log_format": "text",
    "metrics_addr": "127.0.0.1",
}


def flag_name(key: str) -> str:
    """The command-line flag of setting `key` (``num_workers`` -> ``--num-workers``)."""
    return "--" + key.replace("_", "-")


def env_name(key: str) -> str:
    """The environment variable of setting `key` (``num_workers`` -> ``TASKRUNNER_NUM_WORKERS``)."""
    return ENV_PREFIX + key.upper()


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The resolved settings of one process.

    Attributes:
        url: Backend URL (may contain a password: print it through `mask_url`).
        app: The App import string (``MODULE:ATTRIBUTE``), None when not configured.
        log_level: One of ``debug``, ``info``, ``warning``, ``error``, ``critical``.
        log_format: ``text`` or ``json``.
        metrics_port: Port of the Prometheus exporter, None when off.
        metrics_addr: Interface the exporter binds (loopback unless set).
        outbox_url: The application database's URL whose outbox the worker relays into
            the queue (docs/transactional.md); None when there is none. May contain
            a password, like `url`.
        runner: The validated runner configuration (with `TuningConfig` when any
            tuning key is set).
        values: Every setting that was set, by key, after conversion.
        sources: Where each set value came from, by key (``"default"`` when unset).
        config_file: The TOML file that was read, None when none was.
    """

    url: str
    app: str | None
    log_level: str
    log_format: Literal["text", "json"]
    metrics_port: int | None
    metrics_addr: str
    runner: RunnerConfig
    outbox_url: str | None = None
    values: Mapping[str, Any]
    sources: Mapping[str, str]
    config_file: Path | None = None

    def source_of(self, key: str) -> str:
        """Where `key`'s value came from: a file, a variable, a flag, code, or default."""
        return self.sources.get(key, "default")

    def describe(self) -> list[tuple[str, str, str]]:
        """(key, value as text, source) for every key; URLs masked, defaults resolved."""
        tuning = self.runner.tuning
        rows = []
        for key in KEYS:
            value: Any
            if key.group == "runner":
                value = getattr(self.runner, key.name)
            elif key.group == "tuning":
                value = None if tuning is None else getattr(tuning, key.name)
            else:
                value = getattr(self, key.name)
            text = (
                "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
            )
            if key.kind == "url":
                text = mask_url(text)
            rows.append((key.name, text, self.source_of(key.name)))
        return rows


@dataclass(slots=True)
class _Layer:
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    *,
    config_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    override_labels: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve settings from defaults, a TOML file, the environment and `overrides`.

    Args:
        overrides: Highest-precedence values by key (values from code, or flags as
            text; text is converted like an environment variable's).
        config_file: A TOML file to read instead of ``TASKRUNNER_CONFIG`` or
            ``./pyproject.toml``.
        environ: The environment (default `os.environ`).
        cwd: Where ``pyproject.toml`` is looked for (default the current directory).
        override_labels: How to name each override's source in errors (the command
            line passes its flags); default ``"code"``.

    Returns:
        The validated settings.

    Raises:
        ConfigurationError: An unknown key, an unreadable or malformed file, a value
            that cannot be converted, or a value that breaks a rule. The message says
            which key, where it came from, and why.
    """
    env = os.environ if environ is None else environ
    layers: list[_Layer] = []
    read: Path | None = None
    path = _config_path(config_file, env, Path(cwd) if cwd is not None else Path.cwd())
    if path is not None:
        layer = _file_layer(*path)
        layers.append(layer)
        # A pyproject.toml without [tool.taskrunner] was looked at, not read.
        if path[2] or layer.values:
            read = path[0]
    layers.append(_env_layer(env))
    if overrides:
        labels = override_labels or {}
        layers.append(
            _layer(
                dict(overrides),
                lambda key: labels.get(key, "code"),
                unknown_where="code",
                spell=lambda key: key,
            )
        )
    merged = _Layer()
    for layer in layers:
        merged.values.update(layer.values)
        merged.sources.update(layer.sources)
    return _build(merged, read)


def _config_path(
    config_file: str | os.PathLike[str] | None, env: Mapping[str, str], cwd: Path
) -> tuple[Path, str, bool] | None:
    """(path, how it was chosen, whether it must exist and be read whole)."""
    if config_file is not None:
        return Path(config_file), "--config", True
    named = env.get(CONFIG_ENV, "")
    if named:
        return Path(named), CONFIG_ENV, True
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        return pyproject, "pyproject.toml in the current directory", False
    return None


def _file_layer(path: Path, chosen_by: str, explicit: bool) -> _Layer:
    try:
        with path.open("rb") as file:
            document = tomllib.load(file)
    except FileNotFoundError:
        raise ConfigurationError(
            f"config file {str(path)!r} (from {chosen_by}) does not exist", setting="config"
        ) from None
    except OSError as exc:
        raise ConfigurationError(
            f"config file {str(path)!r} (from {chosen_by}) cannot be read: {exc}",
            setting="config",
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(
            f"config file {str(path)!r} (from {chosen_by}) is not valid TOML: {exc}",
            setting="config",
        ) from None
    tool = document.get("tool")
    table: Any
    if isinstance(tool, dict) and "taskrunner" in tool:
        table, where = tool["taskrunner"], f"{path} [tool.taskrunner]"
    elif "taskrunner" in document:
        table, where = document["taskrunner"], f"{path} [taskrunner]"
    elif explicit and path.name != "pyproject.toml":
        table, where = document, str(path)
    else:
        return _Layer()
    if not isinstance(table, dict):
        raise ConfigurationError(f"{where} must be a table of settings", setting="config")
    for name in table:
        if "-" in name:
            spelt = name.replace("-", "_")
            raise ConfigurationError(
                f"{where}: write {spelt}, not {name}: settings are spelt with underscores "
                "in files (dashes only in command-line flags)",
                setting=spelt,
            )
    return _layer(dict(table), lambda key: where, unknown_where=where, spell=lambda key: key)


def _env_layer(env: Mapping[str, str]) -> _Layer:
    values: dict[str, Any] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV or name in _RESERVED_ENV_NAMES:
            continue
        if name.startswith(_RESERVED_ENV_PREFIXES) or value == "":
            continue
        values[name[len(ENV_PREFIX) :].lower()] = value
    return _layer(
        values,
        lambda key: f"environment variable {env_name(key)}",
        unknown_where="the environment",
        spell=env_name,
    )


def _layer(
    values: dict[str, Any],
    where: Callable[[str], str],
    *,
    unknown_where: str,
    spell: Callable[[str], str],
) -> _Layer:
    renamed = sorted(set(values) & set(RENAMED))
    if renamed:
        old = renamed[0]
        raise ConfigurationError(
            f"{unknown_where}: {spell(old)} was renamed {spell(RENAMED[old])}",
            setting=RENAMED[old],
        )
    unknown = sorted(set(values) - set(_BY_NAME))
    if unknown:
        raise ConfigurationError(
            _unknown_message(unknown, unknown_where, spell), setting=unknown[0]
        )
    layer = _Layer()
    for key, value in values.items():
        source = where(key)
        layer.values[key] = _convert(_BY_NAME[key], value, source)
        layer.sources[key] = source
    return layer


def _unknown_message(unknown: list[str], where: str, spell: Callable[[str], str]) -> str:
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(key, list(_BY_NAME), n=1)
        hint = f" (did you mean {spell(close[0])}?)" if close else ""
        parts.append(f"{spell(key)}{hint}")
    known = ", ".join(spell(key.name) for key in KEYS)
    noun = "setting" if len(unknown) == 1 else "settings"
    return f"unknown {noun} in {where}: {', '.join(parts)}; known settings: {known}"


def _convert(key: Key, value: Any, source: str) -> Any:
    """`value` converted to `key`'s type; text is parsed, other values are checked."""

    def fail(rule: str) -> ConfigurationError:
        return ConfigurationError(f"{source}: {key.name}={value!r} {rule}", setting=key.name)

    text = value.strip() if isinstance(value, str) else None
    if key.kind in ("int", "port"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise fail("must be an integer")
        try:
            integer = int(value if text is None else text)
        except ValueError:
            raise fail("must be an integer") from None
        if key.kind == "port" and not 0 < integer < 65536:
            raise fail("must be a TCP port between 1 and 65535")
        return integer
    if key.kind in ("float", "optional_float"):
        if key.kind == "optional_float" and text is not None and text.lower() in ("", "none"):
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise fail("must be a number of seconds")
        try:
            number = float(value if text is None else text)
        except ValueError:
            raise fail("must be a number of seconds") from None
        if math.isnan(number) or math.isinf(number):
            raise fail("must be a finite number of seconds")
        return number
    if text is None:
        raise fail("must be a string")
    if key.kind == "choice":
        if text.lower() not in key.choices:
            raise fail(f"must be one of {', '.join(key.choices)}")
        return text.lower()
    if key.kind == "url":
        try:
            check_url(text)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{source}: {exc}", setting=key.name) from None
        return text
    if key.kind == "app":
        module, colon, attribute = text.partition(":")
        if not colon or not module or not attribute:
            raise fail("must be MODULE:ATTRIBUTE, e.g. myproject.tasks:app")
        return text
    if not text:
        raise fail("must not be empty")
    return value


def _build(merged: _Layer, config_file: Path | None) -> Settings:
    values, sources = merged.values, merged.sources
    runner_kwargs = {
        k.name: values[k.name] for k in KEYS if k.group == "runner" and k.name in values
    }
    tuning_set = [k for k in KEYS if k.group == "tuning" and k.name in values]
    tuning = None
    if tuning_set:
        missing = [name for name in _TUNING_REQUIRED if name not in values]
        if missing:
            given = ", ".join(f"{k.name} (from {sources[k.name]})" for k in tuning_set)
            raise ConfigurationError(
                f"tuning mode needs min_workers, max_workers and desired_wait_seconds; "
                f"{given} set, but not {', '.join(missing)}",
                setting=missing[0],
            )
        try:
            tuning = TuningConfig(**{k.name: values[k.name] for k in tuning_set})
        except ConfigurationError as exc:
            raise _with_source(exc, sources) from None
    try:
        runner = RunnerConfig(**runner_kwargs, tuning=tuning)
    except ConfigurationError as exc:
        raise _with_source(exc, sources) from None
    full = {**_DEFAULTS, **values}
    return Settings(
        url=full["url"],
        app=full.get("app"),
        log_level=full["log_level"],
        log_format=full["log_format"],
        metrics_port=full.get("metrics_port"),
        metrics_addr=full["metrics_addr"],
        outbox_url=full.get("outbox_url"),
        runner=runner,
        values=dict(values),
        sources=dict(sources),
        config_file=config_file,
    )


def _with_source(exc: ConfigurationError, sources: Mapping[str, str]) -> ConfigurationError:
    source = sources.get(exc.setting or "")
    message = str(exc) if source is None else f"{exc} (from {source})"
    return ConfigurationError(message, setting=exc.setting)
