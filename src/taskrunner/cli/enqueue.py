"""``taskrunner enqueue``: dispatch a task, or one per line of a JSON-lines file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import msgspec

from taskrunner.app import App
from taskrunner.backends import open_queue
from taskrunner.cli.common import (
    CHOOSE_QUEUE,
    DEFAULT_QUEUE,
    EXIT_OK,
    Parser,
    UsageError,
    app_and_queue,
    app_options,
    common_options,
    is_memory,
)
from taskrunner.cli.output import Output
from taskrunner.errors import MessageError
from taskrunner.producer import encode_message
from taskrunner.settings import Settings

__all__ = ["add_parser", "check_old_payload_flag", "run_enqueue"]

# Messages per `Queue.add` call.
_ENQUEUE_CHUNK = 1000


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add the ``enqueue`` command."""
    enqueue = commands.add_parser(
        "enqueue",
        parents=[common_options()],
        help="dispatch a task, or one per line of a JSON-lines file",
        description="Dispatch TASK to a shared backend (not memory://, whose messages "
        "would die with this command). With an App (a first argument MODULE:APP, --app "
        "or setting 'app') the payload is validated against the task's type; without, it "
        "is sent unchecked to --queue (default 'default') and a worker dead-letters it if "
        "the task or payload is wrong. --json (or --output json) prints the result as JSON.",
    )
    app_options(enqueue)
    enqueue.add_argument("task", metavar="TASK", help="registered task name")
    enqueue.add_argument("--queue", help="queue name when no App is given (default: default)")
    payload = enqueue.add_mutually_exclusive_group()
    payload.add_argument(
        "--payload", dest="payload_json", metavar="JSON", help="the payload, as JSON"
    )
    payload.add_argument(
        "--file",
        metavar="FILE",
        help="JSON lines, one payload per line (blank lines skipped); - reads stdin",
    )


def check_old_payload_flag(words: list[str]) -> None:
    """Refuse ``enqueue --json PAYLOAD``, the payload flag before ``--payload``.

    ``--json`` is the output format now, as in every other command. Without this check
    the payload would silently become the task name (``--json`` takes no value).

    Raises:
        UsageError: ``--json=VALUE``, or ``--json`` followed by a JSON document.
    """
    for index, word in enumerate(words):
        if word == "--":
            return
        value = None
        if word.startswith("--json="):
            value = word.partition("=")[2]
        elif word == "--json" and index + 1 < len(words):
            value = words[index + 1]
            try:
                msgspec.json.decode(value)
            except msgspec.DecodeError:
                continue  # a task name or the next option: --json is the output flag
        if value is not None:
            raise UsageError(
                "enqueue: --json is the output format (as in every command); give the "
                "payload with --payload JSON"
            )


async def run_enqueue(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """Validate every payload, send them all, print the message ids."""
    if is_memory(settings.url):
        raise UsageError(
            "enqueue: memory:// lives in this process, so the messages would be gone when "
            "this command exits; give a shared backend with --url or TASKRUNNER_URL, e.g. "
            "redis://127.0.0.1:6379/0"
        )
    app, queue_name = app_and_queue(args, settings, note=False)
    task_name: str = args.task
    if app is None:
        app = App(queue_name)

        # An untyped stand-in: it only serves to encode the envelope.
        @app.task(name=task_name)
        def _untyped(payload: Any) -> None:  # pragma: no cover - never run
            del payload

        where = (
            "" if args.queue is not None else f" and go to queue {DEFAULT_QUEUE!r} ({CHOOSE_QUEUE})"
        )
        print(
            f"taskrunner: no App given: payloads for {task_name!r} are not validated{where}; "
            "a worker dead-letters them if the task name or payload is wrong",
            file=sys.stderr,
        )
    else:
        app.get_task(task_name)
    payloads = _read_payloads(args)
    # Every payload is checked before anything connects, so one bad line sends nothing.
    bodies = []
    for where, payload in payloads:
        try:
            bodies.append(encode_message(app, task_name, payload))
        except MessageError as exc:
            raise UsageError(f"{where}: {exc}") from None
    ids: list[str] = []
    async with open_queue(settings.url, queue_name) as queue:
        for start in range(0, len(bodies), _ENQUEUE_CHUNK):
            ids.extend(await queue.add(bodies[start : start + _ENQUEUE_CHUNK]))
    if out.json:
        out.document({"queue": queue_name, "task": task_name, "message_ids": ids})
    else:
        for message_id in ids:
            out.line(message_id)
    return EXIT_OK


def _read_payloads(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(where, payload) pairs: where names the flag or the file line, for errors."""
    if args.payload_json is not None:
        return [("--payload", _decode_json(args.payload_json, "--payload"))]
    if args.file is None:
        return [("payload", None)]
    if args.file == "-":
        name, lines = "stdin", sys.stdin.read().splitlines()
    else:
        try:
            lines = Path(args.file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise UsageError(f"--file {args.file!r}: {exc.strerror or exc}") from None
        name = args.file
    payloads = [
        (f"{name} line {number}", _decode_json(line, f"{name} line {number}"))
        for number, line in enumerate(lines, 1)
        if line.strip()
    ]
    if not payloads:
        raise UsageError(f"{name}: no payloads (expected one JSON value per line)")
    return payloads


def _decode_json(text: str, where: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise UsageError(f"{where}: invalid JSON: {exc}") from None
