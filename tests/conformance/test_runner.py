"""`load_harness_factory`, `main` and `run`, in process."""

from __future__ import annotations

import gc
import io

import pytest

from taskrunner.queue import Delivery, Queue
from taskrunner_backends.memory import InMemoryQueue
from taskrunner_conformance import (
    BaseHarness,
    QueueFactoryHarness,
    load_harness_factory,
    main,
    run,
)
from taskrunner_conformance.harness import Harness

from .harnesses import MemoryHarness, subclass_factory


async def queue_factory(namespace: str) -> Queue:
    return await MemoryHarness().open_queue(namespace)


def not_a_harness() -> object:
    return object()


NOT_CALLABLE = 42


def test_a_harness_class_is_a_factory_called_once_per_test() -> None:
    factory = load_harness_factory("tests.conformance.harnesses:MemoryHarness")

    first, second = factory(), factory()

    assert isinstance(first, MemoryHarness)
    assert first is not second


def test_an_async_function_is_a_queue_factory_wrapped_in_a_real_time_harness() -> None:
    factory = load_harness_factory("tests.conformance.test_runner:queue_factory")

    harness = factory()

    assert isinstance(harness, QueueFactoryHarness)
    assert isinstance(harness, BaseHarness)
    assert harness.lease_seconds > 0


@pytest.mark.parametrize(
    "spec",
    ["no colon", "tests.conformance.test_runner:", "tests.conformance.test_runner:missing"],
)
def test_malformed_specs_are_rejected(spec: str) -> None:
    with pytest.raises(ValueError, match=r"expected|has no attribute"):
        load_harness_factory(spec)


def test_not_callable_is_rejected() -> None:
    with pytest.raises(ValueError, match="not callable"):
        load_harness_factory("tests.conformance.test_runner:NOT_CALLABLE")


def test_a_factory_returning_something_else_fails_when_called() -> None:
    factory = load_harness_factory("tests.conformance.test_runner:not_a_harness")

    with pytest.raises(TypeError, match="lacks the Harness members"):
        factory()


def test_main_prints_the_report_for_the_selected_properties() -> None:
    out = io.StringIO()

    status = main(
        ["tests.conformance.harnesses:memory_harness", "--properties", "P9,P10", "-q"], stdout=out
    )

    assert status == 0
    lines = out.getvalue().splitlines()
    assert any(line.startswith("P9   passed") for line in lines)
    assert any(line.startswith("P1   not run") for line in lines)
    assert "hooks    storage_size" in lines


def test_main_reports_an_unloadable_factory() -> None:
    out = io.StringIO()

    assert main(["nowhere_at_all:factory"], stdout=out) == 2
    assert "cannot load" in out.getvalue()


def test_harness_protocol_is_structural() -> None:
    assert isinstance(MemoryHarness(), Harness)
    assert not isinstance(object(), Harness)


class _LeavesACoroutineWhenItFails(InMemoryQueue):
    """receive without a wait fails, holding two coroutines it never awaits."""

    async def receive(
        self, consumer: str, *, max_messages: int, wait_seconds: float, lease_seconds: float
    ) -> list[Delivery]:
        if wait_seconds == 0:
            # In a cycle and promoted to the oldest generation, as the frames of a test
            # that ran a while are: only a full collection frees them, at a random moment.
            pending: list[object] = [self.len(), self.len()]
            pending.append(pending)
            gc.collect()
            raise RuntimeError("receive without a wait is broken")
        return await super().receive(
            consumer,
            max_messages=max_messages,
            wait_seconds=wait_seconds,
            lease_seconds=lease_seconds,
        )


def test_what_a_failed_test_leaves_behind_is_reported_against_it_not_the_next_one() -> None:
    # P2 fails, two never-awaited coroutines in its traceback; P3 runs next.
    report = run(
        subclass_factory(_LeavesACoroutineWhenItFails), properties=["P2", "P3"], quiet=True
    )

    tests = {t.name: t for p in report.properties for t in p.tests}
    (failed,) = [t for t in tests.values() if t.outcome == "failed"]
    assert "receive without a wait is broken" in failed.reason
    assert "at teardown" in failed.reason
    # pytest groups the two; the reason names the first.
    assert "first: exception ignored in <coroutine object InMemoryQueue.len" in failed.reason
    assert {t.outcome for t in tests.values() if t is not failed} == {"passed"}
