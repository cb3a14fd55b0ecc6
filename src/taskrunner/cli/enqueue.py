"""``taskrunner enqueue``: dispatch a task, or one per line of a JSON-lines file."""

from __future__ import annotations

import argparse
import math
import re
import sys
from datetime import datetime
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
from taskrunner.producer import Producer, encode_message
from taskrunner.settings import Settings

__all__ = ["add_parser", "check_old_payload_flag", "parse_at", "parse_duration", "run_enqueue"]

_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``30s``, ``1.5s``, ``250ms``, ``2m``, ``1h``, ``1d`` or plain seconds, as seconds.

    Raises:
        UsageError: Anything else (negative, empty, another unit).
    """
    match = _DURATION.fullmatch(text)
    if match is None:
        raise UsageError(
            f"--delay {text!r}: expected a duration such as 30s, 1.5s, 250ms, 2m, 1h or 1d"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not math.isfinite(seconds):
        raise UsageError(f"--delay {text!r}: too large")
    return seconds


def parse_at(text: str) -> datetime:
    """An ISO-8601 instant with its offset (``2026-12-01T10:00:00Z``, ``...+01:00``).

    Raises:
        UsageError: Not ISO-8601, or without an offset (a naive time is ambiguous).
    """
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--at {text!r}: expected an ISO-8601 time with offset, e.g. 2026-12-01T10:00:00Z"
        ) from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise UsageError(
            f"--at {text!r} has no UTC offset; add one (Z, +01:00, ...) so the instant is "
            "unambiguous"
        )
    return moment


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
    when = enqueue.add_mutually_exclusive_group()
    when.add_argument(
        "--delay",
        metavar="DURATION",
        help="deliver no earlier than this from now: 30s, 1.5s, 250ms, 2m, 1h, 1d",
    )
    when.add_argument(
        "--at",
        metavar="TIME",
        help="deliver no earlier than this ISO-8601 time with offset, e.g. 2026-12-01T10:00:00Z",
    )
    enqueue.add_argument(
        "--unique-key",
        metavar="KEY",
        help="add nothing while a message with KEY is queued, delayed or running "
        "(prints that message's id)",
    )
    enqueue.add_argument(
        "--partition-key",
        metavar="KEY",
        help="on a partitioned queue (redis+cluster:// with shards > 1), keep every "
        "message with KEY on one shard, in order",
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
    delay = None if args.delay is None else parse_duration(args.delay)
    at = None if args.at is None else parse_at(args.at)
    unique_key: str | None = args.unique_key
    if unique_key is not None and not unique_key:
        raise UsageError("--unique-key must not be empty")
    partition_key: str | None = args.partition_key
    if partition_key is not None and not partition_key:
        raise UsageError("--partition-key must not be empty")
    payloads = _read_payloads(args)
    # Every payload is checked before anything connects, so one bad line sends nothing.
    for where, payload in payloads:
        try:
            encode_message(app, task_name, payload)
        except MessageError as exc:
            if where == _NO_PAYLOAD:
                # Not "Expected array, got null": the user gave nothing, not null.
                codec = app.get_task(task_name).codec
                raise UsageError(
                    f"task {task_name!r} takes a payload ({codec.type_name}) and none was "
                    "given: pass it with --payload JSON, or one per line with --file"
                ) from None
            raise UsageError(f"{where}: {exc}") from None
    async with open_queue(settings.url, queue_name) as queue:
        sent = await Producer(queue, app).dispatch_many(
            task_name,
            [p for _, p in payloads],
            delay=delay,
            at=at,
            unique_key=unique_key,
            partition_key=partition_key,
        )
    if out.json:
        document: dict[str, Any] = {
            "queue": queue_name,
            "task": task_name,
            "message_ids": [str(m) for m in sent],
        }
        if unique_key is not None or app.get_task(task_name).is_unique:
            document["added"] = sent.added
        out.document(document)
    else:
        for message_id, added in zip(sent, sent.added, strict=True):
            out.line(message_id)
            if not added:
                print(
                    f"taskrunner: note: message {message_id} holds the unique key: "
                    "nothing was added",
                    file=sys.stderr,
                )
    return EXIT_OK


# Where the payload came from when neither --payload nor --file was given.
_NO_PAYLOAD = "payload"


def _read_payloads(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(where, payload) pairs: where names the flag or the file line, for errors."""
    if args.payload_json is not None:
        return [("--payload", _decode_json(args.payload_json, "--payload"))]
    if args.file is None:
        return [(_NO_PAYLOAD, None)]
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
