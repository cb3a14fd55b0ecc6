"""TASKRUNNER_CONFORMANCE_SEED replays the model-based test (P40), the one random test."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from taskrunner_backends.memory import InMemoryQueue
from taskrunner_conformance import run
from taskrunner_conformance.settings import EFFORT_ENV, SEED_ENV, seed

from .harnesses import SubclassHarness

ADDED: list[bytes] = []


class RecordingQueue(InMemoryQueue):
    """Remembers every body the state machine adds, in order."""

    async def add(self, bodies: Sequence[bytes]) -> list[str]:
        ADDED.extend(bodies)
        return await super().add(bodies)


def recording_harness() -> SubclassHarness:
    return SubclassHarness(RecordingQueue)


def bodies_of_one_run(monkeypatch: pytest.MonkeyPatch, chosen: str | None) -> list[bytes]:
    if chosen is None:
        monkeypatch.delenv(SEED_ENV, raising=False)
    else:
        monkeypatch.setenv(SEED_ENV, chosen)
    ADDED.clear()
    report = run(recording_harness, properties=["P40"], quiet=True)
    (p40,) = [p for p in report.properties if p.definition.id == "P40"]
    assert p40.outcome == "passed", report.format()
    assert ADDED, "the model-based test added nothing"
    return list(ADDED)


def test_the_same_seed_replays_the_same_operations_and_another_seed_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(EFFORT_ENV, "0.05")

    first = bodies_of_one_run(monkeypatch, "1234")
    again = bodies_of_one_run(monkeypatch, "1234")
    other = bodies_of_one_run(monkeypatch, "98765")

    assert again == first
    assert other != first


@pytest.mark.parametrize("text", ["abc", "1.5", "0x10"])
def test_a_seed_that_is_not_an_integer_is_refused_by_name(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SEED_ENV, text)

    with pytest.raises(ValueError, match=SEED_ENV):
        seed()


def test_no_seed_means_hypothesis_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SEED_ENV, " ")

    assert seed() is None
