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
    EXIT_OK,
    Parser,
    UsageError,
    app_and_queue,
    app_options,
    common_options,
)
from taskrunner.cli.output import Output
from taskrunner.errors import MessageError
from taskrunner.producer import Producer
from taskrunner.settings import Settings
from taskrunner_backends.memory import InMemoryQueue

__all__ = ["add_parser", "run_enqueue"]

# Messages per `Queue.add` call.
_ENQUEUE_CHUNK = 1000


def add_parser(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add the ``enqueue`` command."""
    enqueue = commands.add_parser(
        "enqueue",
        parents=[common_options(json_flag=False)],
        help="dispatch a task, or one per line of a JSON-lines file",
        description="Dispatch TASK. With an App (a first argument MODULE:APP, --app or "
        "setting 'app') the payload is validated "
        "against the task's type; without, it is sent unchecked to --queue (default "
        "'default') and a worker dead-letters it if the task or payload is wrong.",
    )
    app_options(enqueue)
    enqueue.add_argument("task", metavar="TASK", help="registered task name")
    enqueue.add_argument("--queue", help="queue name when no App is given (default: default)")
    payload = enqueue.add_mutually_exclusive_group()
    payload.add_argument("--json", dest="payload_json", metavar="JSON", help="the payload")
    payload.add_argument(
        "--file",
        metavar="FILE",
        help="JSON lines, one payload per line (blank lines skipped); - reads stdin",
    )


async def run_enqueue(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """Validate every payload, send them all, print the message ids."""
    app, queue_name = app_and_queue(args, settings)
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
    # Every payload is checked before anything connects, so one bad line sends nothing.
    # encode() only builds bytes; the queue it is given is never touched.
    producer = Producer(InMemoryQueue(), app)
    bodies = []
    for where, payload in payloads:
        try:
            bodies.append(producer.encode(task_name, payload))
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
        return [("--json", _decode_json(args.payload_json, "--json"))]
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
