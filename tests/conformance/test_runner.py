"""`load_harness_factory` and `main`, in process."""

from __future__ import annotations

import io

import pytest

from taskrunner.queue import Queue
from taskrunner_conformance import BaseHarness, QueueFactoryHarness, load_harness_factory, main
from taskrunner_conformance.harness import Harness

from .harnesses import MemoryHarness


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
