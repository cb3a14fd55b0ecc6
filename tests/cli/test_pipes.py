"""Output into a pipe whose reader has gone (``| head``): a quiet exit, never a traceback."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from taskrunner import open_queue
from taskrunner.cli import EXIT_BROKEN_PIPE

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 60.0


def environment() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TASKRUNNER_") or k.startswith("TASKRUNNER_TEST_")
    }


def into_closed_pipe(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run the command with stdout a pipe whose read end is already closed.

    Closing the reader before the command starts makes its first write fail, every
    time: what ``| head -1`` does to a longer output, without the race.
    """
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "taskrunner", *argv],
            cwd=ROOT,
            env=environment(),
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=DEADLINE_SECONDS,
            check=False,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "argv",
    [
        ["config"],
        ["config", "--json"],
        ["inspect", "--queue", "q"],
        ["dead-letters", "list", "--json", "--queue", "q"],
        ["demo", "--tasks", "20"],
    ],
)
def test_a_closed_pipe_ends_the_command_quietly_with_exit_141(argv: list[str]) -> None:
    result = into_closed_pipe(*argv)

    assert result.stderr == ""
    assert result.returncode == EXIT_BROKEN_PIPE == 141


@pytest.mark.parametrize("argv", [["--help"], ["worker", "--help"], ["--version"]])
def test_help_into_a_closed_pipe_is_quiet(argv: list[str]) -> None:
    result = into_closed_pipe(*argv)

    assert result.stderr == ""
    # Recent argparse ignores the failed write itself (exit 0); older ones raise it.
    assert result.returncode in (0, EXIT_BROKEN_PIPE)


@pytest.mark.redis
def test_dead_letters_list_json_into_head_exits_quietly(redis_ns_url: str, tmp_path: Path) -> None:
    # Far more than a pipe holds, so the writer is still writing when head exits.
    async def bury() -> None:
        async with open_queue(redis_ns_url, "q") as queue:
            await queue.add([b"x" * 1000] * 2000)
            deliveries = await queue.receive(
                "c", max_messages=2000, wait_seconds=0, lease_seconds=600
            )
            await queue.dead_letter(deliveries, reason="for the pipe test")

    asyncio.run(bury())
    command = [
        sys.executable,
        "-m",
        "taskrunner",
        "dead-letters",
        "list",
        "--json",
        "--limit",
        "2000",
        "--queue",
        "q",
        "--url",
        redis_ns_url,
    ]
    errors = tmp_path / "stderr"
    with errors.open("w") as stderr:
        writer = subprocess.Popen(
            command, cwd=ROOT, env=environment(), stdout=subprocess.PIPE, stderr=stderr
        )
        assert writer.stdout is not None
        head = subprocess.run(
            ["head", "-1"], stdin=writer.stdout, capture_output=True, timeout=DEADLINE_SECONDS
        )
        writer.stdout.close()
        code = writer.wait(timeout=DEADLINE_SECONDS)

    assert head.stdout == b"{\n"
    assert errors.read_text() == ""
    assert code == EXIT_BROKEN_PIPE
