"""``taskrunner config``: every setting's effective value and where it came from."""

from __future__ import annotations

import argparse

from taskrunner.cli.common import EXIT_OK, Parser, app_options, runner_options
from taskrunner.cli.output import Output
from taskrunner.settings import Settings

__all__ = ["add_parser", "show_config"]


def add_parser(commands: argparse._SubParsersAction[Parser], common: Parser) -> None:
    """Add the ``config`` command."""
    config = commands.add_parser(
        "config",
        parents=[common],
        help="print the effective settings and where each came from",
    )
    app_options(config)
    runner_options(config)


def show_config(settings: Settings, out: Output) -> int:
    """Print the settings table (or JSON document)."""
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
