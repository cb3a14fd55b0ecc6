"""The ``taskrunner`` command.

Commands::

    taskrunner worker MODULE:APP [--url URL] [--num-workers N] [--burst] ...
    taskrunner enqueue TASK [--app MODULE:APP] [--json PAYLOAD | --file FILE|-]
    taskrunner inspect [--app MODULE:APP | --queue NAME ...] [--json]
    taskrunner dead-letters list|show ID|retry ID...|--all|purge ID...|--all [--yes]
    taskrunner demo [--url URL] [--tasks N] [--workers N]
    taskrunner config [--json]          (the effective settings and their sources)

Every command reads settings as `taskrunner.settings` describes (defaults <
``[tool.taskrunner]`` of ./pyproject.toml or ``--config FILE`` < ``TASKRUNNER_*``
environment variables < flags). Output is a human-readable table; ``--json`` (for
``enqueue``: ``--output json``, since its ``--json`` is the payload) prints JSON.

Exit codes:

* 0 - success; for ``worker``: stopped by SIGTERM/SIGINT (drained, or after a second
  signal with running tasks cancelled and their messages released), or ``--burst``
  found the queue empty.
* 1 - the backend failed (unreachable at start, refused the credentials, replied
  with an error), or ``dead-letters show/retry/purge`` did not find an id.
* 2 - bad usage or configuration: unknown flag or setting, a value breaking a rule, an
  App that cannot be imported, an unknown task, an invalid payload.
* 130 - interrupted (Ctrl-C) during a command other than ``worker`` and ``demo``.

Errors the user can fix print one line, without a traceback. A ``worker`` whose
backend goes away *after* start does not exit: it logs, backs off and resumes, so
a supervisor does not restart-loop it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import difflib
import importlib
import inspect
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TextIO

import msgspec

from taskrunner import __version__
from taskrunner.app import App
from taskrunner.backends import connect, open_queue
from taskrunner.codec import decode_envelope
from taskrunner.errors import (
    BackendError,
    ConfigurationError,
    DecodeError,
    MessageError,
)
from taskrunner.logs import configure_logging, mask_secrets, mask_url
from taskrunner.producer import Producer
from taskrunner.queue import DeadLetter, Queue, QueueAdmin, WorkerInfo
from taskrunner.runner import Runner
from taskrunner.settings import KEYS, Settings, flag_name, load_settings
from taskrunner.tuning import predicted_wait

__all__ = ["EXIT_BACKEND", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "load_app", "main"]

EXIT_OK = 0
EXIT_BACKEND = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

_log = logging.getLogger("taskrunner.cli")

# `dead-letters show ID` scans this many of the oldest dead letters for ID (the admin
# contract lists oldest first and has no lookup by id).
SHOW_SCAN_LIMIT = 10_000

# After a second SIGTERM/SIGINT, how long the runner may take to return before the
# command cancels it outright (seconds).
FORCE_STOP_GRACE_SECONDS = 5.0

# Consumers listed per queue by `inspect` in table form (JSON lists them all).
INSPECT_CONSUMERS_SHOWN = 50

# Dead-letter reasons are cut to this many characters in `dead-letters list`.
_REASON_WIDTH = 60

# Messages per `Queue.add` call in `enqueue`.
_ENQUEUE_CHUNK = 1000


class _UsageError(Exception):
    """Bad command-line usage (argparse would exit; we return 2 instead)."""


class _NotFoundError(Exception):
    """Something the user named (a dead letter id) does not exist."""


class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, refuses abbreviations, and suggests close option names."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # An abbreviation would silently accept typos such as --num-worker.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            known = sorted(_option_strings(self))
            for word in message.split(":", 1)[1].split():
                close = difflib.get_close_matches(word.split("=")[0], known, n=1)
                if close:
                    message += f" (did you mean {close[0]}?)"
                    break
        raise _UsageError(f"{self.prog}: {message}")


# -- loading the App -------------------------------------------------------------------


def load_app(spec: str, *, where: str = "--app") -> App:
    """Import the `App` named by ``MODULE:ATTRIBUTE`` (a dotted attribute path is fine).

    The attribute may be an `App` or a function taking no arguments that returns one.
    The current directory is put on the import path first (as ``python -m`` does), so
    ``taskrunner worker myproject.tasks:app`` works from the project directory.

    Args:
        spec: ``MODULE:ATTRIBUTE``.
        where: Where `spec` came from, for error messages.

    Raises:
        ConfigurationError: `spec` is malformed, the module cannot be found, the
            attribute is missing, or it is not an App. An ImportError raised *inside*
            the module propagates unchanged (its traceback is what you need).
    """
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ConfigurationError(
            f"{where}: {spec!r} must be MODULE:ATTRIBUTE, e.g. myproject.tasks:app",
            setting="app",
        )
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigurationError(
                f"{where}: cannot import module {module_name!r} ({exc}); run the command "
                "from the directory containing it, or install it",
                setting="app",
            ) from None
        raise
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            apps = sorted(name for name, value in vars(module).items() if isinstance(value, App))
            raise ConfigurationError(
                f"{where}: module {module_name!r} has no attribute {attribute!r}; "
                f"App objects in it: {', '.join(apps) or 'none'}",
                setting="app",
            ) from None
    if not isinstance(obj, App) and _is_factory(obj):
        obj = obj()
    if not isinstance(obj, App):
        raise ConfigurationError(
            f"{where}: {spec!r} is a {type(obj).__name__}, not a taskrunner.App "
            "(or a function returning one)",
            setting="app",
        )
    return obj


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every option of `parser` and of its subcommands (unknown options surface at the top)."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.update(_option_strings(sub))
    return found


def _is_factory(obj: Any) -> bool:
    """Whether `obj` is a function that can be called without arguments."""
    if not callable(obj) or isinstance(obj, type):
        return False
    try:
        inspect.signature(obj).bind()
    except (TypeError, ValueError):
        return False
    return True


# -- the parser --------------------------------------------------------------------------


def _common_options(*, output: bool = True, json_flag: bool = True) -> _Parser:
    """Options of every command; `output` adds ``--output`` (and `json_flag` ``--json``)."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--config",
        metavar="FILE",
        help="TOML settings file (default: [tool.taskrunner] of ./pyproject.toml; "
        "env TASKRUNNER_CONFIG)",
    )
    _setting_option(common, "url", metavar="URL")
    _setting_option(common, "log_level", metavar="LEVEL")
    _setting_option(common, "log_format", metavar="FORMAT")
    if not output:
        common.set_defaults(output="text")
        return common
    formats = common.add_mutually_exclusive_group()
    formats.add_argument(
        "--output",
        choices=["text", "json"],
        default="text",
        help="output format (default: %(default)s)",
    )
    if json_flag:
        formats.add_argument(
            "--json",
            dest="output",
            action="store_const",
            const="json",
            help="same as --output json",
        )
    return common


def _setting_option(
    parser: argparse._ActionsContainer, key: str, *aliases: str, metavar: str | None = None
) -> None:
    spec = next(k for k in KEYS if k.name == key)
    help_text = spec.help + (f" ({', '.join(spec.choices)})" if spec.choices else "")
    parser.add_argument(
        flag_name(key),
        *aliases,
        dest=f"setting:{key}",
        metavar=metavar or _METAVARS.get(spec.kind, "VALUE"),
        default=argparse.SUPPRESS,
        help=help_text,
    )


_METAVARS = {"int": "N", "port": "PORT", "float": "SECONDS", "optional_float": "SECONDS"}


def _runner_options(parser: argparse.ArgumentParser) -> None:
    runner = parser.add_argument_group("runner settings (see docs/configuration.md)")
    aliases = {"num_workers": ("--workers",), "num_fetchers": ("--fetchers",)}
    for key in KEYS:
        if key.group == "runner":
            _setting_option(runner, key.name, *aliases.get(key.name, ()))
    tuning = parser.add_argument_group(
        "tuning mode (set min-workers, max-workers and desired-wait-seconds to enable)"
    )
    for key in KEYS:
        if key.group == "tuning":
            _setting_option(tuning, key.name)
    _setting_option(parser, "metrics_port", metavar="PORT")
    _setting_option(parser, "metrics_addr", metavar="ADDRESS")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="taskrunner",
        description="Run and operate taskrunner workers.",
        epilog="Exit codes: 0 success, 1 backend failure or id not found, "
        "2 usage or configuration error, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"taskrunner {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common_options()

    worker = commands.add_parser(
        "worker",
        parents=[_common_options(output=False)],
        help="run a worker process until SIGTERM/SIGINT (or, with --burst, until empty)",
        description="Run the tasks of an App. SIGTERM or SIGINT stops fetching and lets "
        "running tasks finish (up to --drain-timeout-seconds); a second signal cancels "
        "them at once and releases their messages. Exit 0 after either.",
    )
    worker.add_argument(
        "app", nargs="?", metavar="MODULE:APP", help="the App to run (or setting 'app')"
    )
    worker.add_argument("--burst", action="store_true", help="stop once the queue is empty")
    _runner_options(worker)

    enqueue = commands.add_parser(
        "enqueue",
        parents=[_common_options(json_flag=False)],
        help="dispatch a task, or one per line of a JSON-lines file",
        description="Dispatch TASK. With --app (or setting 'app') the payload is validated "
        "against the task's type; without, it is sent unchecked to --queue (default "
        "'default') and a worker dead-letters it if the task or payload is wrong.",
    )
    enqueue.add_argument("task", metavar="TASK", help="registered task name")
    _setting_option(enqueue, "app", metavar="MODULE:APP")
    enqueue.add_argument("--queue", help="queue name when no App is given (default: default)")
    payload = enqueue.add_mutually_exclusive_group()
    payload.add_argument("--json", dest="payload_json", metavar="JSON", help="the payload")
    payload.add_argument(
        "--file",
        metavar="FILE",
        help="JSON lines, one payload per line (blank lines skipped); - reads stdin",
    )

    inspect_ = commands.add_parser(
        "inspect",
        parents=[common],
        help="show queues: ready, in flight, dead, consumers, predicted wait",
    )
    _setting_option(inspect_, "app", metavar="MODULE:APP")
    inspect_.add_argument(
        "--queue",
        action="append",
        metavar="NAME",
        help="queue to show (repeatable; default: the App's queue, else 'default')",
    )

    dead = commands.add_parser(
        "dead-letters", help="list, show, retry or purge dead-lettered messages"
    )
    dead_commands = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    dead_common = _Parser(add_help=False)
    _setting_option(dead_common, "app", metavar="MODULE:APP")
    dead_common.add_argument("--queue", help="queue name (default: the App's queue, else default)")
    listing = dead_commands.add_parser(
        "list", parents=[common, dead_common], help="the oldest dead letters"
    )
    listing.add_argument("--limit", type=int, default=20, help="how many (default: %(default)s)")
    show = dead_commands.add_parser(
        "show", parents=[common, dead_common], help="one dead letter, with its payload"
    )
    show.add_argument("id", metavar="ID")
    retry = dead_commands.add_parser(
        "retry",
        parents=[common, dead_common],
        help="put dead letters back on their queue (each moved atomically)",
    )
    retry.add_argument("ids", nargs="*", metavar="ID")
    retry.add_argument("--all", action="store_true", help="retry every dead letter")
    purge = dead_commands.add_parser(
        "purge", parents=[common, dead_common], help="delete dead letters for good"
    )
    purge.add_argument("ids", nargs="*", metavar="ID")
    purge.add_argument("--all", action="store_true", help="delete every dead letter")
    purge.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    demo = commands.add_parser(
        "demo",
        parents=[_common_options(output=False)],
        help="dispatch and process a few thousand tasks, with live progress",
        description="A producer and a burst worker on the configured backend (default "
        "memory://, nothing to install). On a shared backend the demo uses a queue of "
        "its own and deletes it at the end.",
    )
    demo.add_argument("--tasks", type=_positive_int, default=3000, help="tasks to dispatch")
    demo.add_argument("--workers", type=_positive_int, default=64, help="worker pool size")

    config = commands.add_parser(
        "config",
        parents=[common],
        help="print the effective settings and where each came from",
    )
    _setting_option(config, "app", metavar="MODULE:APP")
    _runner_options(config)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


# -- main ----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(f"{exc}\nRun 'taskrunner --help' for the commands and options.", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    handler: logging.Handler | None = None
    root = logging.getLogger()
    previous_level = root.level
    try:
        settings = _settings(args)
        level = settings.log_level
        if args.command == "demo" and settings.source_of("log_level") == "default":
            level = "critical"  # the demo prints its own progress
        handler = configure_logging(level, settings.log_format)
        return _run(args, settings)
    except ConfigurationError as exc:
        print(f"taskrunner: configuration error: {mask_secrets(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except (_UsageError, MessageError) as exc:
        print(f"taskrunner: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BackendError as exc:
        print(f"taskrunner: backend error: {mask_secrets(str(exc))}", file=sys.stderr)
        return EXIT_BACKEND
    except _NotFoundError as exc:
        print(f"taskrunner: {exc}", file=sys.stderr)
        return EXIT_BACKEND
    except KeyboardInterrupt:
        print("taskrunner: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        # In-process callers (tests) must not keep a handler on a stream they closed.
        if handler is not None:
            root.removeHandler(handler)
            root.setLevel(previous_level)


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for name, value in vars(args).items():
        if name.startswith("setting:"):
            key = name.removeprefix("setting:")
            overrides[key] = value
            labels[key] = f"option {flag_name(key)}"
    if getattr(args, "app", None) is not None and args.command == "worker":
        overrides["app"] = args.app
        labels["app"] = "argument MODULE:APP"
    return load_settings(overrides, config_file=args.config, override_labels=labels)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    out = _Output(args.output, sys.stdout)
    command: str = args.command
    if command == "config":
        return _show_config(settings, out)
    if command == "worker":
        return asyncio.run(_worker(args, settings))
    if command == "demo":
        return asyncio.run(_demo(args, settings))
    if command == "enqueue":
        return asyncio.run(_enqueue(args, settings, out))
    if command == "inspect":
        return asyncio.run(_inspect(args, settings, out))
    return asyncio.run(_dead_letters(args, settings, out))


# -- output ----------------------------------------------------------------------------------


@dataclass
class _Output:
    format: str
    stream: TextIO

    @property
    def json(self) -> bool:
        return self.format == "json"

    def line(self, text: str = "") -> None:
        print(text, file=self.stream)

    def document(self, value: Any) -> None:
        print(msgspec.json.format(msgspec.json.encode(value), indent=2).decode(), file=self.stream)

    def table(
        self, headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = ""
    ) -> None:
        widths = [len(h) for h in headers]
        for row in rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
        for row in [headers, *rows]:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
            self.line((indent + "  ".join(cells)).rstrip())


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if 0 < value < 0.1:
        return f"{value * 1000:.1f}ms"
    if value < 60:
        return f"{value:.1f}s"
    if value < 3600:
        return f"{value / 60:.1f}m"
    return f"{value / 3600:.1f}h"


def _when(unix_seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(unix_seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


# -- config --------------------------------------------------------------------------------


def _show_config(settings: Settings, out: _Output) -> int:
    rows = settings.describe()
    if out.json:
        out.document(
            {
                "config_file": None if settings.config_file is None else str(settings.config_file),
                "settings": {key: {"value": value, "source": src} for key, value, src in rows},
            }
        )
        return EXIT_OK
    read = settings.config_file if settings.config_file is not None else "none"
    out.line(f"config file: {read}")
    out.table(("SETTING", "VALUE", "SOURCE"), rows)
    return EXIT_OK


# -- worker --------------------------------------------------------------------------------


async def _worker(args: argparse.Namespace, settings: Settings) -> int:
    if settings.app is None:
        raise _UsageError(
            "worker needs the App to run: taskrunner worker MODULE:APP "
            "(or set 'app' in the config file or TASKRUNNER_APP)"
        )
    app = load_app(settings.app, where=settings.source_of("app"))
    process = _WorkerProcess(settings.runner.drain_timeout_seconds)
    with _signal_handlers(process.on_signal):
        try:
            await process.serve(app, settings, burst=args.burst)
        except asyncio.CancelledError:
            if process.signals:
                # A signal before the runner existed, or the forced stop after a second.
                return EXIT_OK
            raise
    return EXIT_OK


class _WorkerProcess:
    """The worker command's state: its runner (once built) and the signals seen."""

    def __init__(self, drain_timeout_seconds: float) -> None:
        self.runner: Runner | None = None
        self.signals = 0
        self._drain = drain_timeout_seconds
        self._task = asyncio.current_task()

    def on_signal(self, signum: int) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.runner is None:
            _log.warning("%s received before the worker started; exiting", name)
            if self._task is not None:
                self._task.cancel()
            return
        if self.signals == 1:
            _log.warning(
                "%s received: stopping; running tasks get up to %gs to finish "
                "(send it again to stop now)",
                name,
                self._drain,
            )
        else:
            _log.warning(
                "%s received again: cancelling running tasks and releasing their messages",
                name,
            )
            if self.signals == 2:
                asyncio.get_running_loop().call_later(FORCE_STOP_GRACE_SECONDS, self._force)
        self.runner.stop()

    def _force(self) -> None:
        # The runner should be gone by now. If a loop inside it missed its cancellation
        # (Python 3.11's asyncio.wait_for can swallow one in client libraries),
        # cancelling the command's task cancels every loop of its TaskGroup once more:
        # the promise "a second signal stops fast" must not depend on every library.
        if self._task is not None and not self._task.done():
            _log.warning(
                "the worker did not stop within %gs of the second signal; cancelling it",
                FORCE_STOP_GRACE_SECONDS,
            )
            self._task.cancel()

    async def serve(self, app: App, settings: Settings, *, burst: bool) -> None:
        url = settings.url
        queue = await connect(url, app.queue)
        try:
            if url.partition("://")[0].lower() == "memory":
                _log.warning(
                    "backend memory:// lives in this process: no other process can enqueue "
                    "to this worker; use a shared backend such as redis://"
                )
            runner = Runner(queue, app, settings.runner)
            close_metrics = await _start_metrics(runner, settings)
            _log.info(
                "worker for %s: queue %r on %s%s",
                settings.app,
                app.queue,
                mask_url(url),
                " (burst: stops when the queue is empty)" if burst else "",
            )
            self.runner = runner
            try:
                await runner.run(burst=burst)
            finally:
                if close_metrics is not None:
                    close_metrics()
        finally:
            await queue.aclose()


@contextmanager
def _signal_handlers(callback: Callable[[int], None]) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    installed = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, callback, signum)
        except (NotImplementedError, RuntimeError, ValueError):
            # Not the main thread, or a platform without loop signal handlers.
            continue
        installed.append(signum)
    try:
        yield
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


async def _start_metrics(runner: Runner, settings: Settings) -> Callable[[], None] | None:
    """Start the Prometheus exporter when ``metrics_port`` is set; returns its closer."""
    port = settings.metrics_port
    if port is None:
        return None
    from taskrunner.metrics import start_metrics_server

    try:
        server = start_metrics_server(runner, port, addr=settings.metrics_addr)
    except OSError as exc:
        raise ConfigurationError(
            f"metrics_port={port} (from {settings.source_of('metrics_port')}): cannot listen "
            f"on {settings.metrics_addr}:{port}: {exc.strerror or exc}",
            setting="metrics_port",
        ) from None
    _log.info("metrics on http://%s:%d/metrics", settings.metrics_addr, server.port)
    return server.close


# -- enqueue ---------------------------------------------------------------------------------


def _read_payloads(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(where, payload) pairs: where names the flag or the file line, for errors."""
    if args.payload_json is not None:
        return [("--json", _decode_json(args.payload_json, "--json"))]
    if args.file is None:
        return [("payload", None)]
    if args.file == "-":
        name, lines = "stdin", sys.stdin.read().splitlines()
    else:
        try:
            lines = Path(args.file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise _UsageError(f"--file {args.file!r}: {exc.strerror or exc}") from None
        name = args.file
    payloads = [
        (f"{name} line {number}", _decode_json(line, f"{name} line {number}"))
        for number, line in enumerate(lines, 1)
        if line.strip()
    ]
    if not payloads:
        raise _UsageError(f"{name}: no payloads (expected one JSON value per line)")
    return payloads


def _decode_json(text: str, where: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise _UsageError(f"{where}: invalid JSON: {exc}") from None


def _app_and_queue(args: argparse.Namespace, settings: Settings) -> tuple[App | None, str]:
    app = None if settings.app is None else load_app(settings.app, where=settings.source_of("app"))
    queue_name: str | None = args.queue
    if app is not None and queue_name is not None and queue_name != app.queue:
        raise _UsageError(
            f"--queue {queue_name!r} differs from the queue of {settings.app} ({app.queue!r}); "
            "give one or the other"
        )
    return app, queue_name or (app.queue if app is not None else "default")


async def _enqueue(args: argparse.Namespace, settings: Settings, out: _Output) -> int:
    app, queue_name = _app_and_queue(args, settings)
    task_name: str = args.task
    if app is None:
        app = App(queue_name)

        # An untyped stand-in: it only serves to encode the envelope.
        @app.task(name=task_name)
        def _untyped(payload: Any) -> None:  # pragma: no cover - never run
            del payload

        print(
            f"taskrunner: no --app: payloads for {task_name!r} are not validated; a worker "
            "dead-letters them if the task name or payload is wrong",
            file=sys.stderr,
        )
    else:
        app.get_task(task_name)
    payloads = _read_payloads(args)
    if settings.url.partition("://")[0].lower() == "memory":
        print(
            "taskrunner: note: memory:// lives in this process; the messages are gone when "
            "this command exits (use a shared backend such as redis://)",
            file=sys.stderr,
        )
    async with open_queue(settings.url, queue_name) as queue:
        producer = Producer(queue, app)
        bodies = []
        for where, payload in payloads:
            try:
                bodies.append(producer.encode(task_name, payload))
            except MessageError as exc:
                raise _UsageError(f"{where}: {exc}") from None
        ids: list[str] = []
        for start in range(0, len(bodies), _ENQUEUE_CHUNK):
            ids.extend(await queue.add(bodies[start : start + _ENQUEUE_CHUNK]))
    if out.json:
        out.document({"queue": queue_name, "task": task_name, "message_ids": ids})
    else:
        for message_id in ids:
            out.line(message_id)
    return EXIT_OK


# -- inspect ---------------------------------------------------------------------------------


class _WorkerSummary(msgspec.Struct, kw_only=True):
    processes: int
    workers: int
    busy: int
    average_seconds: float | None


class _QueueReport(msgspec.Struct, kw_only=True):
    queue: str
    url: str
    ready: int
    delayed: int
    in_flight: int
    dead: int
    oldest_ready_age_seconds: float | None
    oldest_in_flight_age_seconds: float | None
    consumers: list[dict[str, Any]]
    workers: _WorkerSummary | None
    predicted_wait_seconds: float | None


def _average_seconds(workers: list[WorkerInfo]) -> float | None:
    """Average task duration over live processes, weighted by their pool sizes."""
    timed = [(w.average_seconds, w.workers) for w in workers if w.average_seconds is not None]
    weight = sum(n for _, n in timed)
    return sum(seconds * n for seconds, n in timed) / weight if weight else None


async def _report(queue: Queue, name: str, url: str) -> _QueueReport:
    stats = await queue.stats()
    workers: list[WorkerInfo] | None = None
    registry = queue.worker_registry
    if registry is not None:
        workers = await registry.live_workers()
    summary = None
    wait = None
    if workers is not None:
        summary = _WorkerSummary(
            processes=len(workers),
            workers=sum(w.workers for w in workers),
            busy=sum(w.busy for w in workers),
            average_seconds=_average_seconds(workers),
        )
        wait = predicted_wait(summary.average_seconds, stats.ready, summary.workers)
    return _QueueReport(
        queue=name,
        url=mask_url(url),
        ready=stats.ready,
        delayed=stats.delayed,
        in_flight=stats.in_flight,
        dead=stats.dead,
        oldest_ready_age_seconds=stats.oldest_ready_age_seconds,
        oldest_in_flight_age_seconds=stats.oldest_in_flight_age_seconds,
        consumers=[
            {"name": c.name, "pending": c.pending, "idle_seconds": c.idle_seconds}
            for c in stats.consumers
        ],
        workers=summary,
        predicted_wait_seconds=wait,
    )


async def _inspect(args: argparse.Namespace, settings: Settings, out: _Output) -> int:
    app = None if settings.app is None else load_app(settings.app, where=settings.source_of("app"))
    names: list[str] = args.queue or [app.queue if app is not None else "default"]
    reports = []
    for name in dict.fromkeys(names):
        async with open_queue(settings.url, name) as queue:
            reports.append(await _report(queue, name, settings.url))
    if out.json:
        out.document({"queues": reports})
        return EXIT_OK
    for index, report in enumerate(reports):
        if index:
            out.line()
        _print_report(report, out)
    return EXIT_OK


def _print_report(report: _QueueReport, out: _Output) -> None:
    out.line(f"queue {report.queue!r} on {report.url}")
    workers = report.workers
    if workers is None:
        worker_text = "- (this backend keeps no worker registry)"
    else:
        worker_text = (
            f"{workers.workers} in {workers.processes} process(es), {workers.busy} busy, "
            f"average task {_seconds(workers.average_seconds)}"
        )
    rows = [
        ("ready", f"{report.ready}  (oldest waiting {_seconds(report.oldest_ready_age_seconds)})"),
        ("delayed", str(report.delayed)),
        (
            "in flight",
            f"{report.in_flight}  (longest idle {_seconds(report.oldest_in_flight_age_seconds)})",
        ),
        ("dead-lettered", str(report.dead)),
        ("workers", worker_text),
        ("predicted wait", _seconds(report.predicted_wait_seconds)),
    ]
    for label, value in rows:
        out.line(f"  {label:<15} {value}")
    consumers = report.consumers
    if not consumers:
        out.line("  consumers: none")
        return
    out.line(f"  consumers ({len(consumers)}):")
    shown = consumers[:INSPECT_CONSUMERS_SHOWN]
    out.table(
        ("NAME", "PENDING", "IDLE"),
        [(c["name"], str(c["pending"]), _seconds(c["idle_seconds"])) for c in shown],
        indent="    ",
    )
    if len(consumers) > len(shown):
        out.line(f"    ... {len(consumers) - len(shown)} more (--json lists all)")


# -- dead letters ------------------------------------------------------------------------------


async def _dead_letters(args: argparse.Namespace, settings: Settings, out: _Output) -> int:
    _, queue_name = _app_and_queue(args, settings)
    action: str = args.action
    if action in ("retry", "purge"):
        if args.all and args.ids:
            raise _UsageError(f"dead-letters {action}: give IDs or --all, not both")
        if not args.all and not args.ids:
            raise _UsageError(f"dead-letters {action}: give the IDs to {action}, or --all")
    async with open_queue(settings.url, queue_name) as queue:
        admin = queue.admin
        if admin is None:
            raise ConfigurationError(
                f"the backend at {mask_url(settings.url)} does not support dead-letter "
                "administration (its queue offers no admin interface)",
                setting="url",
            )
        if action == "list":
            return await _list_dead(admin, queue_name, args.limit, out)
        if action == "show":
            return await _show_dead(admin, queue_name, args.id, out)
        if action == "retry":
            return await _retry_dead(admin, queue_name, None if args.all else args.ids, out)
        dead = (await queue.stats()).dead
        return await _purge_dead(admin, queue_name, None if args.all else args.ids, dead, args, out)


def _task_of(body: bytes) -> str:
    try:
        return decode_envelope(body).task
    except DecodeError:
        return "-"


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


async def _list_dead(admin: QueueAdmin, queue_name: str, limit: int, out: _Output) -> int:
    if limit < 1:
        raise _UsageError(f"--limit {limit} must be >= 1")
    letters = await admin.list_dead_letters(limit=limit)
    if out.json:
        out.document({"queue": queue_name, "dead_letters": [_dead_document(d) for d in letters]})
        return EXIT_OK
    if not letters:
        out.line(f"no dead letters on queue {queue_name!r}")
        return EXIT_OK
    out.table(
        ("ID", "TASK", "DELIVERIES", "DEAD AT", "REASON"),
        [
            (
                d.message_id,
                _task_of(d.body),
                str(d.delivery_count),
                _when(d.dead_at),
                _short(d.reason, _REASON_WIDTH),
            )
            for d in letters
        ],
    )
    if len(letters) == limit:
        out.line(f"(the oldest {limit}; --limit N shows more)")
    return EXIT_OK


def _dead_document(letter: DeadLetter) -> dict[str, Any]:
    envelope: dict[str, Any] | None
    try:
        decoded = decode_envelope(letter.body)
    except DecodeError:
        envelope = None
    else:
        envelope = {
            "id": decoded.id,
            "task": decoded.task,
            "enqueued_at": decoded.enqueued_at,
            "headers": decoded.headers,
            "payload": msgspec.json.decode(decoded.payload),
        }
    return {
        "id": letter.message_id,
        "original_id": letter.original_id,
        "reason": letter.reason,
        "delivery_count": letter.delivery_count,
        "dead_at": letter.dead_at,
        "envelope": envelope,
        "body_base64": base64.b64encode(letter.body).decode(),
    }


async def _find_dead(admin: QueueAdmin, queue_name: str, dead_id: str) -> DeadLetter:
    for letter in await admin.list_dead_letters(limit=SHOW_SCAN_LIMIT):
        if letter.message_id == dead_id:
            return letter
    raise _NotFoundError(
        f"no dead letter {dead_id!r} on queue {queue_name!r} (among the oldest "
        f"{SHOW_SCAN_LIMIT}); 'taskrunner dead-letters list' shows the ids"
    )


async def _show_dead(admin: QueueAdmin, queue_name: str, dead_id: str, out: _Output) -> int:
    letter = await _find_dead(admin, queue_name, dead_id)
    document = _dead_document(letter)
    if out.json:
        out.document({"queue": queue_name, **document})
        return EXIT_OK
    age = max(0.0, time.time() - letter.dead_at)
    rows = [
        ("dead letter", letter.message_id),
        ("queue", queue_name),
        ("original id", letter.original_id or "-"),
        ("deliveries", str(letter.delivery_count)),
        ("dead at", f"{_when(letter.dead_at)} ({_seconds(age)} ago)"),
        ("reason", letter.reason),
    ]
    envelope = document["envelope"]
    if envelope is not None:
        rows += [
            ("task", envelope["task"]),
            ("task id", envelope["id"]),
            ("enqueued at", _when(envelope["enqueued_at"])),
        ]
        rows += [(f"header {k}", v) for k, v in sorted(envelope["headers"].items())]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        out.line(f"{label.ljust(width)}  {value}")
    if envelope is not None:
        out.line("payload:")
        pretty = msgspec.json.format(msgspec.json.encode(envelope["payload"]), indent=2)
        out.line(pretty.decode())
    else:
        out.line("body (not a taskrunner message):")
        out.line(repr(letter.body))
    return EXIT_OK


async def _retry_dead(
    admin: QueueAdmin, queue_name: str, ids: list[str] | None, out: _Output
) -> int:
    new_ids = await admin.retry_dead_letters(ids)
    missing = None if ids is None else len(ids) - len(new_ids)
    if out.json:
        out.document({"queue": queue_name, "retried": len(new_ids), "message_ids": new_ids})
    else:
        out.line(f"retried {len(new_ids)} dead letter(s) onto queue {queue_name!r}")
        for message_id in new_ids:
            out.line(f"  new message id {message_id}")
    if missing:
        raise _NotFoundError(
            f"{missing} of {len(ids or [])} id(s) were not dead letters of queue "
            f"{queue_name!r} (already retried or purged?)"
        )
    return EXIT_OK


async def _purge_dead(
    admin: QueueAdmin,
    queue_name: str,
    ids: list[str] | None,
    dead: int,
    args: argparse.Namespace,
    out: _Output,
) -> int:
    count = dead if ids is None else len(ids)
    if not args.yes:
        if not sys.stdin.isatty():
            raise _UsageError(
                "dead-letters purge deletes messages for good; pass --yes to confirm "
                "(or run it on a terminal to be asked)"
            )
        what = f"all {count} dead letter(s)" if ids is None else f"{count} dead letter(s)"
        prompt = f"Delete {what} of queue {queue_name!r} for good? [y/N] "
        answer = await asyncio.to_thread(input, prompt)
        if answer.strip().lower() not in ("y", "yes"):
            out.line("nothing deleted")
            return EXIT_OK
    deleted = await admin.purge_dead_letters(ids)
    if out.json:
        out.document({"queue": queue_name, "purged": deleted})
    else:
        out.line(f"purged {deleted} dead letter(s) from queue {queue_name!r}")
    if ids is not None and deleted < len(ids):
        raise _NotFoundError(
            f"{len(ids) - deleted} of {len(ids)} id(s) were not dead letters of queue "
            f"{queue_name!r}"
        )
    return EXIT_OK


# -- demo --------------------------------------------------------------------------------------


async def _demo(args: argparse.Namespace, settings: Settings) -> int:
    from taskrunner.demo import run_demo

    runners: list[Runner] = []
    main_task = asyncio.current_task()

    def on_signal(signum: int) -> None:
        if not runners and main_task is not None:
            main_task.cancel()
        for runner in runners:
            runner.stop()  # the second signal skips the drain

    with _signal_handlers(on_signal):
        try:
            await run_demo(
                url=settings.url, tasks=args.tasks, workers=args.workers, on_runner=runners.append
            )
        except asyncio.CancelledError:
            print("taskrunner: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
    return EXIT_OK
