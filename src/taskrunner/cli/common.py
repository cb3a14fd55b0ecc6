"""What every command shares: exit codes, errors, the parser class, option helpers.

Internal module of the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from taskrunner.app import App
from taskrunner.cli.app import load_app
from taskrunner.errors import ConfigurationError
from taskrunner.queue import Queue, QueueAdmin
from taskrunner.redaction import mask_url
from taskrunner.settings import KEYS, RENAMED, Settings, flag_name

__all__ = [
    "CHOOSE_QUEUE",
    "DEFAULT_QUEUE",
    "EXIT_BACKEND",
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "NotFoundError",
    "Parser",
    "UsageError",
    "app_and_queue",
    "app_argument",
    "app_options",
    "common_options",
    "is_memory",
    "note_default_queue",
    "positive_int",
    "renamed_flag",
    "resolve_app_argument",
    "runner_options",
    "setting_option",
    "signal_handlers",
]

EXIT_OK = 0
EXIT_BACKEND = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# The reader of our stdout went away; 128 + SIGPIPE, as a shell reports a tool it killed.
EXIT_BROKEN_PIPE = 141


class UsageError(Exception):
    """Bad command-line usage (argparse would exit; we return 2 instead)."""


class NotFoundError(Exception):
    """Something the user named (a dead letter id) does not exist."""


class Parser(argparse.ArgumentParser):
    """Raises instead of exiting, refuses abbreviations, and suggests close option names."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # An abbreviation would silently accept typos such as --num-worker.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Raise `UsageError` with `message` (and the closest option to an unknown one)."""
        if message.startswith("unrecognized arguments:"):
            known = sorted(_option_strings(self))
            for word in message.split(":", 1)[1].split():
                close = difflib.get_close_matches(word.split("=")[0], known, n=1)
                if close:
                    message += f" (did you mean {close[0]}?)"
                    break
        raise UsageError(f"{self.prog}: {message}")


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every option of `parser` and of its subcommands (unknown options surface at the top)."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.update(_option_strings(sub))
    return found


def common_options(*, output: bool = True, json_flag: bool = True) -> Parser:
    """Options of every command; `output` adds ``--output`` (and `json_flag` ``--json``)."""
    common = Parser(add_help=False)
    common.add_argument(
        "--config",
        metavar="FILE",
        help="TOML settings file (default: [tool.taskrunner] of ./pyproject.toml; "
        "env TASKRUNNER_CONFIG)",
    )
    setting_option(common, "url", metavar="URL")
    setting_option(common, "log_level", metavar="LEVEL")
    setting_option(common, "log_format", metavar="FORMAT")
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


_METAVARS = {"int": "N", "port": "PORT", "float": "SECONDS", "optional_float": "SECONDS"}


def setting_option(
    parser: argparse._ActionsContainer, key: str, *, metavar: str | None = None
) -> None:
    """Add the flag of setting `key` (its one name, dashed); the value lands in ``setting:KEY``."""
    spec = next(k for k in KEYS if k.name == key)
    help_text = spec.help + (f" ({', '.join(spec.choices)})" if spec.choices else "")
    parser.add_argument(
        flag_name(key),
        dest=f"setting:{key}",
        metavar=metavar or _METAVARS.get(spec.kind, "VALUE"),
        default=argparse.SUPPRESS,
        help=help_text,
    )


def app_options(parser: argparse.ArgumentParser, *, option: bool = True) -> None:
    """Add the App of a command: an optional first argument, and ``--app`` (`option`).

    `resolve_app_argument` reconciles the two.
    """
    app_argument(parser)
    if option:
        setting_option(parser, "app", metavar="MODULE:APP")


def app_argument(parser: argparse.ArgumentParser) -> None:
    """The optional positional ``MODULE:APP`` (add it before the command's own)."""
    parser.add_argument(
        "app_argument",
        nargs="?",
        metavar="MODULE:APP",
        help="the App (the same as --app; or setting 'app')",
    )


# MODULE:ATTRIBUTE with dotted names on both sides: what an App argument looks like,
# and what no backend's message id does (Redis: 1714824001234-0, memory: dead-3).
_APP_SHAPE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def resolve_app_argument(args: argparse.Namespace) -> str | None:
    """The App given as an argument (None if none), checked against ``--app``.

    ``dead-letters retry`` and ``purge`` take any number of ids, so there the first
    one is the App when it has the ``MODULE:ATTRIBUTE`` shape.

    Raises:
        UsageError: The argument and ``--app`` name different Apps.
    """
    given: str | None = getattr(args, "app_argument", None)
    ids: list[str] | None = getattr(args, "ids", None)
    if given is None and ids and _APP_SHAPE.fullmatch(ids[0]):
        given = ids.pop(0)
    option: str | None = getattr(args, "setting:app", None)
    if given is not None and option is not None and option != given:
        raise UsageError(
            f"the App is given twice with different values: argument {given!r} and "
            f"--app {option!r}; give it once"
        )
    return given


class _Renamed(argparse.Action):
    """A former flag: using it is an error that names the one flag it became."""

    def __init__(self, option_strings: list[str], dest: str, *, new: str) -> None:
        super().__init__(
            option_strings, dest, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        self.new = new

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        raise UsageError(f"{option_string} was renamed {self.new}")


def renamed_flag(parser: argparse._ActionsContainer, old: str, new: str) -> None:
    """Make `old` a usage error naming `new` (no silent aliases)."""
    parser.add_argument(old, action=_Renamed, dest=f"renamed:{old}", new=new)


def runner_options(parser: argparse.ArgumentParser) -> None:
    """Flags of every runner and tuning setting, and of the metrics exporter."""
    runner = parser.add_argument_group("runner settings (see docs/configuration.md)")
    for key in KEYS:
        if key.group == "runner":
            setting_option(runner, key.name)
    tuning = parser.add_argument_group(
        "tuning mode (set min-workers, max-workers and desired-wait-seconds to enable)"
    )
    for key in KEYS:
        if key.group == "tuning":
            setting_option(tuning, key.name)
    setting_option(parser, "metrics_port", metavar="PORT")
    setting_option(parser, "metrics_addr", metavar="ADDRESS")
    setting_option(parser, "outbox_url", metavar="URL")
    for old, new in RENAMED.items():
        renamed_flag(parser, flag_name(old), flag_name(new))
    renamed_flag(parser, "--workers", flag_name("num_workers"))
    renamed_flag(parser, "--fetchers", flag_name("num_fetchers"))


def positive_int(text: str) -> int:
    """An integer >= 1 (an argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


DEFAULT_QUEUE = "default"

# How to choose a queue, for the notes printed when none was chosen.
CHOOSE_QUEUE = "choose one with --queue NAME, or give the App as MODULE:APP or --app"


def app_and_queue(
    args: argparse.Namespace, settings: Settings, *, note: bool = True
) -> tuple[App | None, str]:
    """The configured App (if any) and the queue a command works on.

    With neither an App nor ``--queue``, the queue is ``default``; with `note`, a note on
    stderr says so (a misconfigured command would otherwise show an empty queue as if
    it were the right one).
    """
    app = None if settings.app is None else load_app(settings.app, where=settings.source_of("app"))
    queue_name: str | None = args.queue
    if app is not None and queue_name is not None and queue_name != app.queue:
        raise UsageError(
            f"--queue {queue_name!r} differs from the queue of {settings.app} ({app.queue!r}); "
            "give one or the other"
        )
    if queue_name is None and app is None:
        if note:
            note_default_queue()
        return None, DEFAULT_QUEUE
    return app, queue_name or (app.queue if app is not None else DEFAULT_QUEUE)


def note_default_queue() -> None:
    """Say on stderr that the command works on queue ``default`` for want of a choice."""
    print(
        f"taskrunner: note: no App given: working on queue {DEFAULT_QUEUE!r} ({CHOOSE_QUEUE})",
        file=sys.stderr,
    )


def require_admin(queue: Queue, url: str, purpose: str) -> QueueAdmin:
    """`queue.admin`, or a ConfigurationError saying the backend cannot do `purpose`."""
    admin = queue.admin
    if admin is None:
        raise ConfigurationError(
            f"the backend at {mask_url(url)} {purpose} (its queue offers no admin interface)",
            setting="url",
        )
    return admin


def is_memory(url: str) -> bool:
    """Whether `url` names the in-process backend, whose messages die with the process."""
    return url.partition("://")[0].lower() == "memory"


@contextmanager
def signal_handlers(callback: Callable[[int], None]) -> Iterator[None]:
    """Call `callback(signum)` on SIGTERM and SIGINT while the block runs (main thread only)."""
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
