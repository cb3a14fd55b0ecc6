"""Shared pytest configuration: async tests run on a fresh event loop each."""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: The shipped suite skips a property the backend under test does not claim (a
#: capability, a harness hook): not applicable there, unlike a test this machine cannot run.
_SUITE = Path(__file__).resolve().parent.parent / "conformance" / "taskrunner_conformance"
#: Comma-separated test paths this run leaves out, for a later run of their own (CI runs
#: the real-time edges of the PostgreSQL conformance suite alone, off the loaded machine).
DEFERRED_ENV = "TASKRUNNER_TEST_DEFERRED"
#: ``1``: a test skipped for want of something on this machine fails the run (CI sets it).
STRICT_SKIPS_ENV = "TASKRUNNER_TEST_STRICT_SKIPS"

# Redis server discovery and per-test namespaces live in tests/redis_fixtures.py.
pytest_plugins = ["tests.redis_fixtures"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the Redis Cluster tests in one xdist process (``--dist loadgroup``), and
    leave out the paths ``TASKRUNNER_TEST_DEFERRED`` names (reported as deselected).

    Each process starts its own servers; a cluster is 6 of them and takes seconds to
    form, so one process runs every test that starts or shares one.
    """
    deferred = tuple(p.strip() for p in os.environ.get(DEFERRED_ENV, "").split(",") if p.strip())
    if deferred:
        later = [item for item in items if item.nodeid.startswith(deferred)]
        if later:
            config.hook.pytest_deselected(items=later)
            items[:] = [item for item in items if not item.nodeid.startswith(deferred)]
    for item in items:
        if item.get_closest_marker("cluster") is not None:
            item.add_marker(pytest.mark.xdist_group("redis-cluster"))


def _utf8(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Escape lone surrogates in what an xdist worker sends back (its channel takes only
    UTF-8): tests of undecodable file names log them, and the run would stop there."""
    report = yield
    if hasattr(item.config, "workerinput"):
        report.sections = [(title, _utf8(text)) for title, text in report.sections]
        if isinstance(report.longrepr, str):
            report.longrepr = _utf8(report.longrepr)
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests with `asyncio.run` (no plugin needed)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """PostgreSQL for every test that needs one: ``TASKRUNNER_TEST_POSTGRES_URL`` when set
    (shared: tests work in their own schemas and drop only those), else one throwaway
    `LocalPostgres` for the session. No PostgreSQL found is an error, not a skip: a green
    run must mean these tests ran."""
    given = os.environ.get("TASKRUNNER_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    from taskrunner_backends.postgres.local_server import LocalPostgres

    server = LocalPostgres()
    try:
        server.start()
        yield server.url("postgres")
    finally:
        server.cleanup()


def _machine_skips(config: pytest.Config) -> list[tuple[str, str]]:
    """(where, reason) of each skip that is not a property the backend does not claim."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    found: list[tuple[str, str]] = []
    for report in getattr(reporter, "stats", {}).get("skipped", []):
        if not isinstance(report.longrepr, tuple):
            continue
        path, line, reason = report.longrepr
        if Path(path).resolve().is_relative_to(_SUITE):
            continue
        # A test of this repository that does not apply where it is collected says so.
        if reason.removeprefix("Skipped: ").startswith("not applicable"):
            continue
        found.append((f"{path}:{line}", reason.removeprefix("Skipped: ")))
    return found


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With ``TASKRUNNER_TEST_STRICT_SKIPS=1``, a skip for want of a tool or server fails."""
    if hasattr(session.config, "workerinput") or os.environ.get(STRICT_SKIPS_ENV) != "1":
        return
    if _machine_skips(session.config) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say which skips are conformance properties that do not apply, and which are not."""
    skipped = len(terminalreporter.stats.get("skipped", []))
    if not skipped or hasattr(config, "workerinput"):
        return
    machine = _machine_skips(config)
    terminalreporter.section("skips")
    terminalreporter.line(
        f"{skipped - len(machine)} skipped: conformance properties that the backend under"
        " test does not claim (not applicable to it, not missing here)"
    )
    if not machine:
        terminalreporter.line("0 skipped for want of a tool or server on this machine")
        return
    terminalreporter.line(f"{len(machine)} skipped for want of a tool or server on this machine:")
    for where, reason in machine:
        terminalreporter.line(f"  {where}: {reason}")
    if os.environ.get(STRICT_SKIPS_ENV) == "1":
        terminalreporter.line(f"{STRICT_SKIPS_ENV}=1: these fail the run")
