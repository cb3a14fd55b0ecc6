"""Queue names: '.' and '..' are refused by the App and for every backend URL.

Each backend also refuses them when opened directly (not through `connect`); the
Redis and PostgreSQL ones are tested beside their other name checks.
"""

from __future__ import annotations

import pytest

from taskrunner import App, ConfigurationError, cli
from taskrunner.backends import connect
from taskrunner.names import check_queue_name
from taskrunner_backends.memory import open_from_url as open_memory

PATH_STEPS = [".", ".."]
# Nothing listens on port 1: the check must come before any connection attempt.
URLS = [
    "memory://names-test",
    "redis://127.0.0.1:1/0",
    "redis+cluster://127.0.0.1:1",
    "postgresql://127.0.0.1:1/db",
]


@pytest.mark.parametrize("name", PATH_STEPS)
def test_path_steps_are_no_queue_names(name: str) -> None:
    with pytest.raises(ConfigurationError, match="are steps of a path"):
        check_queue_name(name)
    with pytest.raises(ConfigurationError, match="are steps of a path"):
        App(name)


@pytest.mark.parametrize("name", ["...", ".a", "a.", "a..b", "v1.2"])
def test_names_with_dots_are_fine(name: str) -> None:
    assert check_queue_name(name) == name
    assert App(name).queue == name


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("name", PATH_STEPS)
async def test_no_backend_opens_a_queue_named_by_a_path_step(url: str, name: str) -> None:
    with pytest.raises(ConfigurationError, match="are steps of a path"):
        await connect(url, name)


@pytest.mark.parametrize("name", PATH_STEPS)
async def test_the_memory_backend_opened_directly_refuses_them(name: str) -> None:
    with pytest.raises(ConfigurationError, match="are steps of a path"):
        await open_memory("memory://names-test", queue_name=name)


@pytest.mark.parametrize("name", PATH_STEPS)
def test_the_cli_refuses_them_as_a_configuration_error(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["inspect", "--queue", name, "--url", "memory://names-test"])

    assert code == 2
    assert "are steps of a path" in capsys.readouterr().err
