"""Printing for people and for scripts: lines, tables, JSON documents, durations.

Internal module of the command line.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import msgspec

from taskrunner.redaction import mask_secrets

__all__ = ["Output", "seconds", "short", "when"]


@dataclass
class Output:
    """Where a command prints its result, in text or JSON; URL passwords are masked.

    Attributes:
        format: ``text`` or ``json``.
        stream: Where lines go.
        secrets: Strings masked wherever they appear (see `taskrunner.logs.url_secrets`).
    """

    format: str
    stream: TextIO
    secrets: Sequence[str] = ()

    @property
    def json(self) -> bool:
        """Whether the output is JSON."""
        return self.format == "json"

    def line(self, text: str = "") -> None:
        """Print one line."""
        print(mask_secrets(text, self.secrets), file=self.stream)

    def document(self, value: Any) -> None:
        """Print `value` as indented JSON."""
        self.line(msgspec.json.format(msgspec.json.encode(value), indent=2).decode())

    def table(
        self, headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = ""
    ) -> None:
        """Print `rows` under `headers`, columns padded to their widest cell."""
        widths = [len(h) for h in headers]
        for row in rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
        for row in [headers, *rows]:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
            self.line((indent + "  ".join(cells)).rstrip())


def seconds(value: float | None) -> str:
    """A duration for people: ms below 0.1 s, then s, m, h; ``-`` when unknown."""
    if value is None:
        return "-"
    if 0 < value < 0.1:
        return f"{value * 1000:.1f}ms"
    if value < 60:
        return f"{value:.1f}s"
    if value < 3600:
        return f"{value / 60:.1f}m"
    return f"{value / 3600:.1f}h"


def when(unix_seconds: float) -> str:
    """A moment in UTC, to the second."""
    moment = datetime.datetime.fromtimestamp(unix_seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def short(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with ``...``."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."
