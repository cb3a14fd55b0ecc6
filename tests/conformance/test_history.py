"""The history checker: Jepsen's total queue plus lease exclusivity and fencing."""

from __future__ import annotations

import dataclasses

from taskrunner.queue import Delivery, Receipt
from taskrunner_conformance import History, check_history
from taskrunner_conformance.history import EventKind

LEASE = 10.0


class Timeline:
    """A History whose clock the test sets by hand."""

    def __init__(self) -> None:
        self.now = 0.0
        self.history = History(lambda: self.now)

    def at(self, when: float) -> Timeline:
        self.now = when
        return self

    def add(self, ids: list[str], bodies: list[bytes], *, fail: bool = False) -> None:
        fields: dict[str, object] = {"bodies": tuple(bodies)}
        fields.update({"error": "BackendUnavailableError()"} if fail else {"ids": tuple(ids)})
        self.history.record("add", "producer", self.now, **fields)

    def grant(self, consumer: str, message_id: str, count: int, *, body: bytes = b"m") -> Delivery:
        delivery = Delivery(
            message_id=message_id,
            body=body,
            delivery_count=count,
            receipt=Receipt(consumer=consumer, delivery_count=count),
        )
        kind: EventKind = "receive" if count == 1 else "reclaim"
        self.history.record(kind, consumer, self.now, returned=(delivery,))
        return delivery

    def act(self, kind: EventKind, delivery: Delivery, *, lost: bool = False) -> None:
        self.history.record(
            kind,
            delivery.receipt.consumer,
            self.now,
            sent=(delivery,),
            returned=(delivery,) if lost else (),
        )


def test_clean_run_with_a_legitimate_reclaim_is_valid() -> None:
    t = Timeline()
    t.add(["1"], [b"m"])
    first = t.at(1).grant("a", "1", 1)
    t.at(5).act("heartbeat", first)
    second = t.at(16).grant("b", "1", 2)  # heartbeat at 5 + lease 10 < 16
    t.at(17).act("ack", first, lost=True)
    t.at(18).act("ack", second)

    report = check_history(t.history, lease_seconds=LEASE)

    assert report.valid, report.describe()
    assert report.queue.duplicated == {"1": 2}
    assert not report.queue.unfinished


def test_lost_unexpected_and_recovered_messages_are_told_apart() -> None:
    t = Timeline()
    t.add(["1", "2"], [b"one", b"two"])
    t.add([], [b"maybe"], fail=True)
    t.at(1).grant("a", "1", 1, body=b"one")
    t.at(2).grant("a", "x", 1, body=b"maybe")
    t.at(3).grant("a", "y", 1, body=b"nobody added this")
    t.at(4).grant("a", "2", 1, body=b"changed")

    report = check_history(t.history, lease_seconds=LEASE)

    assert not report.valid
    assert report.queue.lost == set()
    assert report.queue.recovered == {"x"}
    assert len(report.queue.unexpected) == 2
    assert report.queue.unfinished == {"1", "2"}


def test_message_never_delivered_is_lost() -> None:
    t = Timeline()
    t.add(["1", "2"], [b"m", b"m"])
    t.at(1).grant("a", "1", 1)

    report = check_history(t.history, lease_seconds=LEASE)

    assert report.queue.lost == {"2"}
    assert not report.valid


def test_reclaim_inside_a_live_lease_is_an_overlap() -> None:
    t = Timeline()
    t.add(["1"], [b"m"])
    t.at(1).grant("a", "1", 1)
    t.at(8).grant("b", "1", 2)  # 1 + 10 > 8: a's lease was live

    report = check_history(t.history, lease_seconds=LEASE)

    assert [v.kind for v in report.violations] == ["overlap"]


def test_heartbeat_extends_the_live_span_the_checker_expects() -> None:
    t = Timeline()
    t.add(["1"], [b"m"])
    first = t.at(1).grant("a", "1", 1)
    t.at(9).act("heartbeat", first)
    t.at(15).grant("b", "1", 2)  # live until 9 + 10

    report = check_history(t.history, lease_seconds=LEASE)

    assert [v.kind for v in report.violations] == ["overlap"]


def test_aged_lease_may_be_reclaimed_at_once() -> None:
    t = Timeline()
    t.add(["1"], [b"m"])
    first = t.at(1).grant("a", "1", 1)
    t.at(2)
    t.history.record_age(first, 12.0)
    t.at(3).grant("b", "1", 2)

    report = check_history(t.history, lease_seconds=LEASE)

    assert not report.violations, report.describe()


def test_stale_ack_that_succeeds_is_a_stale_success_and_a_double_completion() -> None:
    t = Timeline()
    t.add(["1"], [b"m"])
    first = t.at(1).grant("a", "1", 1)
    second = t.at(20).grant("b", "1", 2)
    t.at(21).act("ack", first)
    t.at(22).act("ack", second)

    report = check_history(t.history, lease_seconds=LEASE)

    kinds = sorted(v.kind for v in report.violations)
    assert kinds == ["double-completion", "stale-success"], report.describe()


def test_delivery_after_an_ack_is_reported() -> None:
    t = Timeline()
    t.add(["1"], [b"m"])
    first = t.at(1).grant("a", "1", 1)
    t.at(2).act("ack", first)
    t.at(30).grant("b", "1", 2)

    report = check_history(t.history, lease_seconds=LEASE)

    assert [v.kind for v in report.violations] == ["delivered-after-completion"]


def test_two_grants_of_one_delivery_count_are_a_double_grant() -> None:
    t = Timeline()
    t.add(["1"], [b"m"])
    t.at(1).grant("a", "1", 1)
    t.at(20).grant("b", "1", 2)
    t.at(20).grant("c", "1", 2)

    report = check_history(t.history, lease_seconds=LEASE)

    assert "double-grant" in {v.kind for v in report.violations}


def test_success_for_a_receipt_nobody_granted_is_reported() -> None:
    t = Timeline()
    t.add(["1"], [b"m"])
    t.at(1).grant("a", "1", 1)
    forged = Delivery(
        message_id="1", body=b"m", delivery_count=1, receipt=Receipt(consumer="z", delivery_count=1)
    )
    t.at(2).act("heartbeat", forged)

    report = check_history(t.history, lease_seconds=LEASE)

    assert [v.kind for v in report.violations] == ["unknown-receipt"]


def test_delivery_seen_before_its_add_returned_is_not_unexpected() -> None:
    t = Timeline()
    t.at(5).add(["1"], [b"m"])
    # The add was invoked at 5 and returned at 9; a receive invoked in between saw it.
    t.history.events[-1] = dataclasses.replace(t.history.events[-1], completed_at=9.0)
    t.at(6).grant("a", "1", 1)

    report = check_history(t.history, lease_seconds=LEASE)

    assert report.queue.valid, report.describe()
