"""The reference model accepts every choice the contract allows and nothing else."""

from __future__ import annotations

import pytest

from taskrunner.queue import Delivery, Receipt
from taskrunner_conformance import ReferenceModel


def delivery(message_id: str, consumer: str, count: int, body: bytes = b"m") -> Delivery:
    return Delivery(
        message_id=message_id,
        body=body,
        delivery_count=count,
        receipt=Receipt(consumer=consumer, delivery_count=count),
    )


@pytest.fixture
def model() -> ReferenceModel:
    model = ReferenceModel(lease=10.0)
    model.added([b"m", b"m"], ["1", "2"])
    return model


def test_receive_may_return_any_ready_subset_but_not_nothing(model: ReferenceModel) -> None:
    model.received("a", 1, [delivery("2", "a", 1)])

    with pytest.raises(AssertionError, match="never-delivered"):
        model.received("b", 5, [])


def test_receive_never_returns_a_leased_message(model: ReferenceModel) -> None:
    model.received("a", 2, [delivery("1", "a", 1), delivery("2", "a", 1)])

    with pytest.raises(AssertionError, match="live lease"):
        model.received("b", 1, [delivery("1", "b", 2)])


def test_reclaim_at_the_lease_boundary_may_go_either_way(model: ReferenceModel) -> None:
    model.received("a", 2, [delivery("1", "a", 1), delivery("2", "a", 1)])
    model.advance(10.0)

    model.reclaimed("b", 1, [])
    model.reclaimed("b", 1, [delivery("1", "b", 2)])


def test_reclaim_of_a_live_lease_is_rejected_and_of_a_lapsed_one_accepted(
    model: ReferenceModel,
) -> None:
    model.received("a", 2, [delivery("1", "a", 1), delivery("2", "a", 1)])
    model.advance(6.0)
    model.heartbeat([delivery("1", "a", 1)], [])
    model.advance(6.0)

    with pytest.raises(AssertionError, match="live lease"):
        model.reclaimed("b", 1, [delivery("1", "b", 2)])
    model.reclaimed("b", 1, [delivery("2", "b", 2)])


def test_results_of_fenced_calls_are_predicted_exactly(model: ReferenceModel) -> None:
    old = delivery("1", "a", 1)
    model.received("a", 1, [old])
    model.advance(11.0)
    new = delivery("1", "b", 2)
    model.reclaimed("b", 1, [new])

    model.heartbeat([old, new], [old])
    with pytest.raises(AssertionError, match="reported lost"):
        model.acked([old], [])
    model.acked([new], [])
    assert model.length() == 1


def test_released_message_is_not_due_before_its_delay(model: ReferenceModel) -> None:
    first = delivery("1", "a", 1)
    model.received("a", 1, [first])
    model.released([first], [], delay=5.0)

    with pytest.raises(AssertionError, match="released with a delay"):
        model.received("b", 2, [delivery("2", "b", 1), delivery("1", "b", 2)])
    model.advance(5.0)
    model.reclaimed("b", 1, [delivery("1", "b", 2)])


def test_wrong_count_or_body_is_rejected(model: ReferenceModel) -> None:
    with pytest.raises(AssertionError, match="count"):
        model.received("a", 1, [delivery("1", "a", 2)])
    with pytest.raises(AssertionError, match="body"):
        model.received("a", 1, [delivery("1", "a", 1, body=b"other")])


def test_dead_letters_keep_body_reason_and_count(model: ReferenceModel) -> None:
    first = delivery("1", "a", 1)
    model.received("a", 1, [first])

    model.dead_lettered([first], [], "poison")

    assert model.dead_letters == [("1", b"m", "poison", 1)]
    assert model.length() == 1
