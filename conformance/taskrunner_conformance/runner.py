"""The command-line path: run the whole suite against a factory and print the report.

Usage::

    python -m taskrunner_conformance PACKAGE.MODULE:FACTORY [options] [-- PYTEST_ARGS...]

FACTORY is one of:

* a **harness factory**: a zero-argument callable (a harness class, or a function)
  returning a fresh `taskrunner_conformance.Harness`; called once per test;
* a **queue factory**: ``async def factory(namespace: str) -> Queue`` returning
  independent handles on one logical queue per namespace. It is wrapped in a
  `taskrunner_conformance.QueueFactoryHarness`: real time, a lease of
  ``--lease-seconds`` (default 1 s times ``TASKRUNNER_CONFORMANCE_TIME_SCALE``), no
  hooks. Capabilities are the queue's own.

The module is imported with the current directory on ``sys.path``. pytest runs in
isolation from the current project's configuration (its own empty ini file, no
conftest files, no cache) and writes nothing into the current directory (hypothesis's
files and byte code go to a temporary directory or nowhere). The exit status is 0
only when every property that applies to the backend passed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import pytest
from hypothesis import configuration as hypothesis_configuration

from . import _cli_suite
from ._cli_suite import HarnessSource
from .harness import Harness, HarnessFactory, QueueFactoryHarness, load_harness_factory
from .properties import PROPERTIES
from .report import ConformanceReport, ConformanceReporter

__all__ = ["main", "run"]


def run(
    factory: str | HarnessFactory,
    *,
    properties: Sequence[str] | None = None,
    pytest_args: Sequence[str] = (),
    quiet: bool = False,
    target: str | None = None,
) -> ConformanceReport:
    """Run the suite in this process and return the report (without printing it).

    Args:
        factory: ``"package.module:name"`` (see the module docstring) or a harness factory.
        properties: Run only the tests checking these ids (None: everything).
        pytest_args: Extra pytest arguments (``-x``, ``-k EXPR``, ``-v``...).
        quiet: Silence pytest's own output.
        target: Name shown in the report (defaults to the spec or factory name).
    """
    if isinstance(factory, str):
        label = factory
        harness_factory = load_harness_factory(factory)
    else:
        label = getattr(factory, "__qualname__", repr(factory))
        harness_factory = factory
    reporter = ConformanceReporter(target or label, select=properties, print_report=False)
    with tempfile.TemporaryDirectory(prefix="taskrunner-conformance-") as workdir:
        ini = Path(workdir, "pytest.ini")
        ini.write_text("[pytest]\n", encoding="utf-8")
        args = [
            str(Path(_cli_suite.__file__)),
            "-c",
            str(ini),
            "--rootdir",
            workdir,
            "--noconftest",
            "-p",
            "no:cacheprovider",
            "--tb=short",
            # The suite imports hypothesis before pytest starts; its plugin cannot be
            # rewritten and does not need to be.
            "-W",
            "ignore::pytest.PytestAssertRewriteWarning",
            "-q",
            *pytest_args,
        ]
        plugins = [HarnessSource(harness_factory), reporter]
        # hypothesis keeps a cache of the constants it finds in the code under test in
        # .hypothesis/ of the current directory; the suite must leave that untouched.
        hypothesis_configuration.set_hypothesis_home_dir(Path(workdir, ".hypothesis"))
        try:
            if quiet:
                with contextlib.redirect_stdout(io.StringIO()):
                    exit_code = pytest.main(args, plugins=plugins)
            else:
                exit_code = pytest.main(args, plugins=plugins)
        finally:
            hypothesis_configuration.set_hypothesis_home_dir(None)
    reporter.exit_code = int(exit_code)
    return reporter.report()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m taskrunner_conformance",
        usage="%(prog)s PACKAGE.MODULE:FACTORY [options] [-- PYTEST_ARGS...]",
        description="Run the taskrunner Queue conformance suite against a backend.",
        epilog="Properties: "
        + ", ".join(f"{p.id} {p.name}" for p in PROPERTIES)
        + ". Environment: TASKRUNNER_CONFORMANCE_TIME_SCALE, TASKRUNNER_CONFORMANCE_EFFORT.",
    )
    parser.add_argument(
        "factory",
        help="PACKAGE.MODULE:FACTORY: a harness factory or an async queue factory",
    )
    parser.add_argument(
        "--properties",
        metavar="IDS",
        help="comma-separated property ids to run (default: all), e.g. P1,P14,P31",
    )
    parser.add_argument(
        "--lease-seconds",
        type=float,
        metavar="S",
        help="lease for a bare queue factory (default: 1 s times the time scale)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the report")
    parser.epilog = (parser.epilog or "") + " Arguments after -- go to pytest (-x, -k EXPR, -v...)."
    return parser


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Parse `argv`, run the suite, print the report; return the exit status."""
    out = stdout or sys.stdout
    args = list(sys.argv[1:] if argv is None else argv)
    pytest_args: list[str] = []
    if "--" in args:
        split = args.index("--")
        args, pytest_args = args[:split], args[split + 1 :]
    options = _parser().parse_args(args)
    # Importing the factory's module must not leave __pycache__ in the user's tree.
    sys.dont_write_bytecode = True
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        factory = load_harness_factory(options.factory)
    except (ImportError, ValueError) as exc:
        out.write(f"error: cannot load {options.factory}: {exc}\n")
        return 2
    if options.lease_seconds is not None:
        bare = factory

        def factory() -> Harness:
            harness = bare()
            if isinstance(harness, QueueFactoryHarness):
                harness.lease_seconds = options.lease_seconds
            return harness

    selected = options.properties.split(",") if options.properties else None
    report = run(
        factory,
        properties=selected,
        pytest_args=pytest_args,
        quiet=options.quiet,
        target=options.factory,
    )
    out.write("\n" + report.format() + "\n")
    if options.json:
        Path(options.json).write_text(report.dumps() + "\n", encoding="utf-8")
    return 0 if report.passed_all_applicable else 1
