"""``python manage.py taskrunner_worker [OPTIONS]``: ``taskrunner worker`` with the settings.

The URL and App come from ``settings.TASKRUNNER``; any further options go to
``taskrunner worker`` unchanged (``--num-workers 16``, ``--burst``...).
"""

from __future__ import annotations

import argparse
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from taskrunner.cli import main


class Command(BaseCommand):
    help = "Run a taskrunner worker for settings.TASKRUNNER's app and URL"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("worker_options", nargs=argparse.REMAINDER)

    def handle(self, *args: Any, **options: Any) -> None:
        config = settings.TASKRUNNER
        code = main(["worker", config["app"], "--url", config["url"], *options["worker_options"]])
        if code != 0:
            raise CommandError(f"taskrunner worker exited with {code}", returncode=code)
