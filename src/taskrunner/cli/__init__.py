"""The ``taskrunner`` command.

Commands::

    taskrunner worker MODULE:APP [--url URL] [--num-workers N] [--burst] ...
    taskrunner enqueue [MODULE:APP] TASK [--payload JSON | --file FILE|-] [--json]
                       [--delay 30s | --at 2026-12-01T10:00:00Z] [--unique-key KEY]
    taskrunner cancel [MODULE:APP | --queue NAME] ID [ID...]
    taskrunner schedules MODULE:APP [--url URL]
    taskrunner inspect [MODULE:APP | --queue NAME ...] [--json]
    taskrunner dead-letters list|show ID|retry ID...|--all|purge ID...|--all [--yes]
    taskrunner queue delete NAME [--yes]
    taskrunner db migrate [--url URL]   (apply a PostgreSQL schema's migrations)
    taskrunner db status [--url URL]    (its version against this taskrunner's; counts)
    taskrunner demo [--url URL] [--tasks N] [--num-workers N]
    taskrunner config [--json]          (the effective settings and their sources)
    taskrunner dashboard [MODULE:APP | --queue NAME ...] [--port 8181] [--allow-actions]

Wherever a command takes an App, ``MODULE:APP`` may be its first argument or
``--app MODULE:APP`` (both: they must agree).

Every command reads settings as `taskrunner.settings` describes (defaults <
``[tool.taskrunner]`` of ./pyproject.toml or ``--config FILE`` < ``TASKRUNNER_*``
environment variables < flags). Output is a human-readable table; ``--json`` (or
``--output json``) prints JSON, in every command. ``enqueue`` takes its payload with
``--payload JSON``; its ``--json PAYLOAD`` of earlier versions is refused with a message
naming ``--payload`` (a silent change of meaning would send the payload as the task).

Exit codes:

* 0 - success; for ``worker``: stopped by SIGTERM/SIGINT (drained; or after a second
  signal, with running async tasks cancelled and their messages released and plain
  ``def`` tasks waited for; or after a third, leaving those leased to lapse), or
  ``--burst`` found the queue empty.
* 1 - the backend failed (unreachable at start, refused the credentials, replied
  with an error), or ``dead-letters show/retry/purge`` did not find an id, or
  ``cancel`` could not cancel an id (running, done or unknown).
* 2 - bad usage or configuration: unknown flag or setting, a value breaking a rule, an
  App that cannot be imported, an unknown task, an invalid payload, a port that cannot
  be listened on (``metrics_port``, the dashboard's ``--port`` in use).
* 3 - ``db status``: the schema is missing or older than this taskrunner's (run
  ``db migrate``); 4 - it is newer (upgrade taskrunner).
* 130 - interrupted (Ctrl-C) during a command other than ``worker`` and ``demo``.
* 141 - the reader of the output went away (``taskrunner config | head -1``): the
  command stops quietly, as tools killed by SIGPIPE do (128 + 13).

Errors the user can fix print one line, without a traceback. Anything else (a bug)
prints its traceback, URL secrets masked as everywhere, and exits 1. A ``worker`` whose
backend goes away *after* start does not exit: it logs, backs off and resumes, so
a supervisor does not restart-loop it.

One module per command (``worker``, ``enqueue``, ``inspect``, ``dead_letters``,
``queue``, ``db``, ``demo``, ``config``; ``scheduling`` has ``cancel`` and ``schedules``);
``common`` holds what they share, ``output`` the printing.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import itertools
import logging
import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from taskrunner import __version__
from taskrunner.backends import import_backend
from taskrunner.cli import (
    config,
    dashboard,
    db,
    dead_letters,
    demo,
    enqueue,
    inspect,
    queue,
    relay,
    scheduling,
    worker,
)
from taskrunner.cli.app import load_app
from taskrunner.cli.common import (
    EXIT_BACKEND,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    NotFoundError,
    Parser,
    UsageError,
    common_options,
    resolve_app_argument,
)
from taskrunner.cli.output import Output
from taskrunner.errors import BackendError, ConfigurationError, MessageError
from taskrunner.logs import configure_logging
from taskrunner.redaction import mask_secrets, url_secrets
from taskrunner.settings import Settings, env_name, flag_name, load_settings

__all__ = [
    "EXIT_BACKEND",
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "load_app",
    "main",
]


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="taskrunner",
        description="Run and operate taskrunner workers.",
        epilog="Exit codes: 0 success, 1 backend failure, id not found or a failed worker child, "
        "2 usage or configuration error, 130 interrupted, 141 output pipe closed.",
    )
    parser.add_argument("--version", action="version", version=f"taskrunner {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_options()
    worker.add_parser(commands)
    enqueue.add_parser(commands)
    inspect.add_parser(commands, common)
    dead_letters.add_parser(commands, common)
    queue.add_parser(commands, common)
    scheduling.add_parsers(commands, common)
    demo.add_parser(commands)
    config.add_parser(commands, common)
    db.add_parser(commands, common)
    dashboard.add_parser(commands, common)
    relay.add_parser(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    try:
        code = _main(argv)
        # Flushed here, not at interpreter exit, so a closed pipe is caught below.
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader of our output went away (``| head``): not an error worth a
        # traceback. Python would try to flush again at exit and fail the same way.
        _discard_output()
        return EXIT_BROKEN_PIPE
    return code


def _discard_output() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (OSError, ValueError, io.UnsupportedOperation):
                continue  # not a real file (in-process callers capture output)
    finally:
        os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # Passwords of every URL the command may print: on the command line (wherever it
    # is, even misplaced), in the environment, and later the configured one.
    secrets = _secrets(
        [
            *_url_words(words),
            os.environ.get(env_name("url"), ""),
            os.environ.get(env_name("outbox_url"), ""),
        ]
    )
    parser = _parser()
    try:
        if words[:1] == ["enqueue"]:
            enqueue.check_old_payload_flag(words[1:])
        args = parser.parse_args(words)
    except UsageError as exc:
        _error(f"{exc}\nRun 'taskrunner --help' for the commands and options.", secrets)
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    handler: logging.Handler | None = None
    root = logging.getLogger()
    previous_level = root.level
    try:
        settings = _settings(args)
        secrets = _secrets([settings.url, settings.outbox_url or ""], secrets)
        level = settings.log_level
        if args.command == "demo" and settings.source_of("log_level") == "default":
            level = "critical"  # the demo prints its own progress
        handler = configure_logging(level, settings.log_format, secrets=secrets)
        return _run(args, settings, Output(args.output, sys.stdout, secrets))
    except ConfigurationError as exc:
        _error(f"taskrunner: configuration error: {exc}", secrets)
        return EXIT_USAGE
    except (UsageError, MessageError) as exc:
        _error(f"taskrunner: {exc}", secrets)
        return EXIT_USAGE
    except BackendError as exc:
        _error(f"taskrunner: backend error: {exc}", secrets)
        return EXIT_BACKEND
    except NotFoundError as exc:
        _error(f"taskrunner: {exc}", secrets)
        return EXIT_BACKEND
    except KeyboardInterrupt:
        _error("taskrunner: interrupted", secrets)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        raise  # the reader went away: `main` ends quietly
    except Exception:
        # A bug (ours, a backend's, a library's): its traceback is what a report needs,
        # but its messages may quote the URL. Exit 1, as Python's own handler would.
        _error(f"taskrunner: unexpected error\n{traceback.format_exc().rstrip()}", secrets)
        return EXIT_BACKEND
    finally:
        # In-process callers (tests) must not keep a handler on a stream they closed.
        if handler is not None:
            root.removeHandler(handler)
            root.setLevel(previous_level)


# A URL with a mistyped scheme separator ("redis//", "redis:/"), which may hold a password.
_URL_TYPO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:?//?[^/]")


def _url_words(words: Sequence[str]) -> list[str]:
    """The words that are (or may be) URLs, whose passwords are to be masked.

    Anything with ``://`` or a mistyped form of it, and the value of ``--url``; not
    every word with an ``@`` (an e-mail address in a payload is no URL).
    """
    found = [word for word in words if "://" in word or _URL_TYPO.match(word)]
    flags = ("--url", "--outbox-url")
    found += [after for before, after in itertools.pairwise(words) if before in flags]
    found += [
        word.partition("=")[2] for word in words if word.startswith(tuple(f + "=" for f in flags))
    ]
    return found


def _secrets(texts: Sequence[str], known: Sequence[str] = ()) -> tuple[str, ...]:
    found = dict.fromkeys(known)
    for text in texts:
        # A backend declares its secret options when imported: before they are looked for
        # (in `url_secrets` now, by every later `mask_secrets`), even by a command that
        # never opens the URL.
        import_backend(text)
        found.update(dict.fromkeys(url_secrets(text)))
    return tuple(sorted(found, key=len, reverse=True))


def _error(message: str, secrets: Sequence[str]) -> None:
    """Print one error on stderr, with every URL password masked."""
    print(mask_secrets(message, secrets), file=sys.stderr)


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for name, value in vars(args).items():
        if name.startswith("setting:"):
            key = name.removeprefix("setting:")
            overrides[key] = value
            labels[key] = f"option {flag_name(key)}"
    given = resolve_app_argument(args)
    if given is not None:
        overrides["app"] = given
        labels["app"] = "argument MODULE:APP"
    return load_settings(overrides, config_file=args.config, override_labels=labels)


def _run(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    command: str = args.command
    if command == "config":
        return config.show_config(settings, out)
    if command == "worker":
        return asyncio.run(worker.run_worker(args, settings))
    if command == "demo":
        return asyncio.run(demo.run_demo_command(args, settings))
    if command == "enqueue":
        return asyncio.run(enqueue.run_enqueue(args, settings, out))
    if command == "inspect":
        return asyncio.run(inspect.run_inspect(args, settings, out))
    if command == "queue":
        return asyncio.run(queue.run_queue(args, settings, out))
    if command == "cancel":
        return asyncio.run(scheduling.run_cancel(args, settings, out))
    if command == "schedules":
        return asyncio.run(scheduling.run_schedules(args, settings, out))
    if command == "db":
        return asyncio.run(db.run_db(args, settings, out))
    if command == "dashboard":
        return asyncio.run(dashboard.run_dashboard(args, settings))
    if command == "relay":
        return asyncio.run(relay.run_relay(args, settings))
    return asyncio.run(dead_letters.run_dead_letters(args, settings, out))
