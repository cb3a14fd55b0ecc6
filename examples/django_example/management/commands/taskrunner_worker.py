"""``python manage.py taskrunner_worker [OPTIONS]``: ``taskrunner worker`` with the settings.

The URL and App come from ``settings.TASKRUNNER``; any further options go to
``taskrunner worker`` unchanged (``--num-workers 16``, ``--burst``...).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from taskrunner.cli import main


class Command(BaseCommand):
    help = "Run a taskrunner worker for settings.TASKRUNNER's app and URL"

    def run_from_argv(self, argv: list[str]) -> None:
        # Every option after the command's name is taskrunner worker's, not Django's.
        config = settings.TASKRUNNER
        code = main(["worker", config["app"], "--url", config["url"], *argv[2:]])
        if code != 0:
            raise SystemExit(code)

    def handle(self, *args: Any, **options: Any) -> None:
        # call_command("taskrunner_worker") lands here, without worker options.
        config = settings.TASKRUNNER
        code = main(["worker", config["app"], "--url", config["url"]])
        if code != 0:
            raise CommandError(f"taskrunner worker exited with {code}", returncode=code)
