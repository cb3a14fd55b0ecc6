"""The property list and the contract: every sentence of `Queue` has a test that reads the same."""

from __future__ import annotations

import inspect

import pytest

from taskrunner.queue import (
    Leadership,
    MessageBrowser,
    MessageLookup,
    Queue,
    ResultStore,
    Scheduling,
)
from taskrunner_conformance import PROPERTIES, QueueConformance
from taskrunner_conformance.properties import contract_sentences, contract_test_name


def suite_tests() -> dict[str, tuple[str, ...]]:
    return {
        name: tuple(getattr(member, "conformance_properties", ()))
        for name, member in inspect.getmembers(QueueConformance, inspect.isfunction)
        if name.startswith("test_")
    }


def test_every_contract_sentence_has_a_test_named_after_it() -> None:
    sentences = contract_sentences(Queue.__doc__ or "")
    assert len(sentences) >= 20

    names = {contract_test_name(s) for s in sentences}

    missing = sorted(names - set(suite_tests()))
    assert not missing, missing


@pytest.mark.parametrize(
    "part",
    [Scheduling, Leadership, ResultStore, MessageLookup, MessageBrowser],
    ids=lambda part: part.__name__,
)
def test_every_sentence_of_an_optional_part_has_a_test_named_after_it(part: type) -> None:
    sentences = contract_sentences(part.__doc__ or "")
    assert len(sentences) >= 5

    missing = sorted({contract_test_name(s) for s in sentences} - set(suite_tests()))
    assert not missing, missing


def test_contract_test_name_reads_the_sentence() -> None:
    assert (
        contract_test_name(
            "A message whose lease lapsed is returned by reclaim with its delivery count + 1."
        )
        == "test_message_whose_lease_lapsed_is_returned_by_reclaim_with_its_delivery_count_plus_1"
    )
    assert (
        contract_test_name(
            "`aclose` is idempotent; every other method called after it raises `QueueClosedError`."
        )
        == "test_aclose_is_idempotent_every_other_method_called_after_it_raises_queue_closed_error"
    )


def test_every_test_checks_known_properties_and_every_property_has_a_test() -> None:
    known = {p.id for p in PROPERTIES}
    tests = suite_tests()

    unlabelled = [name for name, ids in tests.items() if not ids]
    unknown = {i for ids in tests.values() for i in ids} - known
    untested = known - {i for ids in tests.values() for i in ids}

    assert not unlabelled
    assert not unknown
    assert not untested
    assert len(known) == len(PROPERTIES), "duplicate property ids"
    assert {f"P{i}" for i in range(1, 41)} <= known
