"""The start of a message body that was cut: what the dashboard can show of it.

The queue page asks the backend for only the first `PREVIEW_BYTES` of each body (see
`taskrunner.queue.MessageBrowser.browse`'s ``body_bytes``), so a 50 MB message costs
what a small one does. A cut envelope is no longer JSON a decoder takes, so
`envelope_start` reads its top-level fields one value at a time, up to the cut: the
envelope's fields before the payload (``v``, ``id``, ``task``, as taskrunner writes
them) are whole, and the payload's JSON text is its start.
"""

from __future__ import annotations

import json

import msgspec

__all__ = ["PREVIEW_BYTES", "EnvelopeStart", "envelope_start"]

# Bytes of each body read for the list: a task name (up to 200 characters), the id and
# 200 characters of payload, even escaped (\uXXXX), fit with room to spare.
PREVIEW_BYTES = 4096

_JSON = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


class EnvelopeStart(msgspec.Struct, frozen=True, kw_only=True):
    """What a cut envelope says before its cut.

    Attributes:
        task: The task's name.
        task_id: The task id, when read before the cut.
        enqueued_at: The dispatch time, when read before the cut (taskrunner writes
            it after the payload: usually not).
        payload: The payload's JSON text up to the cut ("" when the cut comes before it).
        payload_cut: Whether `payload` is only the start of the payload.
    """

    task: str
    task_id: str | None
    enqueued_at: float | None
    payload: str
    payload_cut: bool


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def envelope_start(prefix: bytes) -> EnvelopeStart | None:
    """The fields of the envelope `prefix` starts, read up to where it was cut.

    None when `prefix` is not the start of a taskrunner envelope (not a JSON object,
    another ``v``, no task name before the cut): the page then shows the size only,
    as for any body that is no envelope. Never raises; never evaluates anything.
    """
    text = prefix.decode("utf-8", errors="replace")
    fields: dict[str, object] = {}
    payload: str | None = None
    payload_cut = True
    at = _skip(text, 0)
    if not text.startswith("{", at):
        return None
    at += 1
    while True:
        at = _skip(text, at)
        try:
            key, at = _JSON.raw_decode(text, at)
        except ValueError:
            break
        at = _skip(text, at)
        if not isinstance(key, str) or not text.startswith(":", at):
            break
        at = _skip(text, at + 1)
        try:
            value, end = _JSON.raw_decode(text, at)
        except ValueError:
            if key == "payload":
                payload = text[at:]
            break
        # A value that ends exactly at the cut may be cut itself (a number, a name).
        whole = _skip(text, end) < len(text)
        if key == "payload":
            payload, payload_cut = text[at:end], not whole
        elif whole:
            fields[key] = value
        at = _skip(text, end)
        if not whole or not text.startswith(",", at):
            break
        at += 1
    task, task_id, enqueued_at = fields.get("task"), fields.get("id"), fields.get("enqueued_at")
    if fields.get("v", 1) != 1 or not isinstance(task, str):
        return None
    return EnvelopeStart(
        task=task,
        task_id=task_id if isinstance(task_id, str) else None,
        enqueued_at=(
            float(enqueued_at)
            if isinstance(enqueued_at, int | float) and not isinstance(enqueued_at, bool)
            else None
        ),
        payload=payload or "",
        payload_cut=payload_cut,
    )
