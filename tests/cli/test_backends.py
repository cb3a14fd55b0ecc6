"""Backends by URL: built-in schemes, entry points, lazy imports, error messages."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import EntryPoint, EntryPoints, entry_points as installed_entry_points
from typing import Any

import pytest

from taskrunner import ConfigurationError, backends, connect, known_schemes
from tests.cli import fake_backend
from tests.cli.conftest import Cli

GROUP = "taskrunner.backends"


@pytest.fixture
def fake_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed entry points plus ``fake`` and two broken ones, as pip would add them."""
    installed = list(installed_entry_points(group=GROUP))
    extra = [
        EntryPoint("fake", "tests.cli.fake_backend:open_from_url", GROUP),
        EntryPoint("broken", "tests.cli.no_such_module:open_from_url", GROUP),
        EntryPoint("notcallable", "tests.cli.fake_backend:not_callable", GROUP),
    ]

    def entry_points(**selection: Any) -> EntryPoints:
        return EntryPoints(installed + extra).select(**selection)

    monkeypatch.setattr(backends, "entry_points", entry_points)


def test_known_schemes_lists_built_ins() -> None:
    assert {"memory", "redis", "rediss", "unix"} <= set(known_schemes())


@pytest.mark.usefixtures("fake_entry_points")
async def test_a_third_party_scheme_opens_through_its_entry_point() -> None:
    queue = await connect("fake://anything", "q")
    try:
        await queue.add([b"x"])
        assert await queue.len() == 1
    finally:
        await queue.aclose()

    assert fake_backend.OPENED[-1] == "fake://anything"
    assert "fake" in known_schemes()


@pytest.mark.usefixtures("fake_entry_points")
def test_the_cli_uses_a_third_party_scheme(run: Cli) -> None:
    result = run("inspect", "--url", "FAKE://elsewhere", "--json")

    assert result.code == 0, result.err
    assert result.json()["queues"][0]["ready"] == 0


@pytest.mark.usefixtures("fake_entry_points")
@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "broken://x",
            "backend for broken:// (tests.cli.no_such_module:open_from_url (entry point "
            "'broken' in 'taskrunner.backends')) cannot be loaded: No module named",
        ),
        ("notcallable://x", "which is not a callable factory"),
        ("fak://x", "no backend for URL scheme 'fak' in 'fak://x'; did you mean fake://?"),
    ],
)
async def test_bad_backends_raise_configuration_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        await connect(url, "q")

    assert message in str(caught.value)


async def test_an_unknown_scheme_lists_the_known_ones_and_masks_the_password() -> None:
    with pytest.raises(ConfigurationError) as caught:
        await connect("redis+sentinel://:hunter2@host/0", "q")

    text = str(caught.value)
    assert "no backend for URL scheme 'redis+sentinel'" in text
    assert (
        "known schemes: memory, postgres, postgresql, redis, redis+cluster, rediss, "
        "rediss+cluster, unix" in text
    )
    assert "hunter2" not in text


def test_backends_are_imported_only_when_a_url_asks_for_them() -> None:
    program = (
        "import asyncio, sys, taskrunner, taskrunner.cli\n"
        "async def main():\n"
        "    async with taskrunner.open_queue('memory://', 'q'):\n"
        "        pass\n"
        "asyncio.run(main())\n"
        "assert 'redis' not in sys.modules, 'redis imported'\n"
        "assert 'taskrunner_backends.redis' not in sys.modules\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False, timeout=60
    )

    assert result.returncode == 0, result.stderr
