"""The soak's checker on synthetic completion logs: it must catch every defect class.

Each defect test has a control that differs in the one fact that makes it a defect,
so a checker that flags everything (or nothing) fails one of the two. Times are
seconds on one clock; the lease is 4 s and the documented safe outage 3 s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from taskrunner import Producer, Runner, current_task
from taskrunner.testing import FakeClock

from ..support import LEASE, BlockingHeartbeatQueue, config, make, running
from .checker import Report, build_history, check
from .records import (
    Beat,
    DeadLettered,
    Dispatched,
    DispatchError,
    End,
    Grant,
    LeaseLost,
    LogWriter,
    Phase,
    Record,
    RedisDown,
    RedisUp,
    Stall,
    Start,
    Stats,
    WorkerKilled,
    read_records,
)
from .worker import LeaseLossRecorder

LEASE_SECONDS = 4.0
SAFE = 3.0


class Log:
    """Builds a run's records: jobs dispatched as message ``m<job>``, attempts, faults."""

    def __init__(self, jobs: int = 1) -> None:
        self.records: list[Record] = [
            Phase("faults", 0.0, {"lease": LEASE_SECONDS, "safe_outage": SAFE}),
            Dispatched(list(range(jobs)), [f"m{j}" for j in range(jobs)], 0.0, 0.0),
        ]

    def attempt(
        self,
        job: int,
        *,
        dc: int,
        worker: int,
        start: float,
        end: float | None,
        outcome: str = "ok",
        via: str = "receive",
    ) -> None:
        """A grant just before `start`, the Start, and the End unless `end` is None."""
        consumer = f"w{worker}:{'r' if via == 'reclaim' else 'f0'}"
        msg = f"m{job}"
        self.records.append(Grant(worker, msg, dc, consumer, via, start - 0.01, start))
        self.records.append(Start(worker, job, msg, dc, consumer, start))
        if end is not None:
            self.records.append(End(worker, job, msg, dc, consumer, end, outcome))

    def lease_lost(self, job: int, *, dc: int, worker: int, at: float, text: str) -> None:
        source = "taskrunner.heartbeat" if text.startswith("lease lost") else "taskrunner.executor"
        self.records.append(LeaseLost(worker, f"m{job}", dc, f"w{worker}:f0", at, source, text))

    def outage(self, start: float, end: float) -> None:
        self.records += [RedisDown(start), RedisUp(end)]

    def report(self) -> Report:
        self.records.append(Phase("end", 100.0))
        return check(
            build_history(self.records), lease_seconds=LEASE_SECONDS, safe_outage_seconds=SAFE
        )


def test_a_clean_run_passes() -> None:
    log = Log(jobs=2)
    log.attempt(0, dc=1, worker=1, start=1.0, end=2.0)
    log.attempt(1, dc=1, worker=2, start=1.0, end=1.5, outcome="error")
    log.attempt(1, dc=2, worker=2, start=2.0, end=2.5)

    report = log.report()

    assert (report.lost, report.doubles, report.lease_losses, report.dead) == ([], [], [], [])
    assert report.exit_status == 0
    assert "PASS" in report.describe()


def test_a_job_that_never_succeeded_is_lost() -> None:
    log = Log(jobs=3)
    log.attempt(0, dc=1, worker=1, start=1.0, end=2.0)
    log.attempt(1, dc=1, worker=1, start=1.0, end=1.5, outcome="error")
    log.records.append(WorkerKilled(1, 3.0))
    log.attempt(2, dc=1, worker=2, start=1.0, end=None)  # cut short, never run again

    report = log.report()

    assert report.lost == [1, 2]
    assert report.exit_status == 1
    assert "lost                     2" in report.describe()


def test_a_dead_lettered_job_is_reported_apart_and_fails_the_run() -> None:
    log = Log(jobs=1)
    log.attempt(0, dc=1, worker=1, start=1.0, end=2.0, outcome="error")
    log.records.append(DeadLettered(0, "m0", "attempt 1 of 1 failed"))

    report = log.report()

    assert report.lost == []
    assert [d.job for d in report.dead] == [0]
    assert report.exit_status == 1


def test_jobs_only_added_by_a_dispatch_whose_outcome_is_unknown_are_not_lost() -> None:
    log = Log(jobs=1)
    log.attempt(0, dc=1, worker=1, start=1.0, end=2.0)
    # Job 7's add raised and was never retried: it may never have reached the queue.
    log.records.append(DispatchError([7], 0.5, 0.6, "BackendUnavailableError()"))
    report = log.report()

    assert report.lost == []


@pytest.mark.parametrize(("second_start", "doubled"), [(4.0, True), (5.01, False)])
def test_a_killed_workers_attempt_overlapping_the_next_is_an_unexplained_double(
    second_start: float, doubled: bool
) -> None:
    log = Log()
    log.attempt(0, dc=1, worker=1, start=1.0, end=None)
    log.records.append(WorkerKilled(1, 5.0))  # the first attempt ran until 5.0
    log.attempt(0, dc=2, worker=2, start=second_start, end=9.0, via="reclaim")

    report = log.report()

    assert len(report.unexplained_doubles) == int(doubled)
    assert report.explained_doubles == []
    assert report.exit_status == int(doubled)


def test_two_attempts_running_at_once_after_a_short_outage_are_an_unexplained_double() -> None:
    log = Log()
    log.outage(10.0, 11.5)
    log.attempt(0, dc=1, worker=1, start=8.0, end=20.0)
    log.attempt(0, dc=2, worker=2, start=12.0, end=14.0, via="reclaim")

    report = log.report()

    [double] = report.unexplained_doubles
    assert (double.first.delivery_count, double.second.delivery_count) == (1, 2)
    assert double.overlap_seconds == pytest.approx(2.0)
    assert double.note.startswith("short outage")
    assert report.exit_status == 1


@pytest.mark.parametrize(("outage", "explained"), [(SAFE, True), (SAFE - 0.01, False)])
def test_an_outage_of_at_least_the_safe_bound_explains_a_double(
    outage: float, explained: bool
) -> None:
    log = Log()
    log.outage(10.0, 10.0 + outage)
    log.attempt(0, dc=1, worker=1, start=8.0, end=20.0)
    log.attempt(0, dc=2, worker=2, start=14.0, end=15.0, via="reclaim")

    report = log.report()

    assert len(report.doubles) == 1
    assert len(report.explained_doubles) == int(explained)
    assert report.exit_status == (0 if explained else 1)


def test_a_long_outage_explains_nothing_about_attempts_that_started_after_it() -> None:
    log = Log()
    log.outage(10.0, 18.0)
    log.attempt(0, dc=1, worker=1, start=18.5, end=30.0)
    log.attempt(0, dc=2, worker=2, start=20.0, end=21.0, via="reclaim")

    report = log.report()

    assert len(report.unexplained_doubles) == 1


def test_a_long_outage_long_before_the_second_attempt_explains_nothing() -> None:
    log = Log()
    log.outage(10.0, 18.0)
    log.attempt(0, dc=1, worker=1, start=8.0, end=40.0)
    log.attempt(0, dc=2, worker=2, start=18.0 + LEASE_SECONDS + 5.0, end=30.0, via="reclaim")

    report = log.report()

    assert len(report.unexplained_doubles) == 1


@pytest.mark.parametrize(("stalled_worker", "explained"), [(1, True), (2, False)])
def test_a_long_stall_of_the_first_attempts_process_explains_a_double(
    stalled_worker: int, explained: bool
) -> None:
    log = Log()
    log.records.append(Stall(stalled_worker, 9.0, 14.0))
    log.attempt(0, dc=1, worker=1, start=8.0, end=20.0)
    log.attempt(0, dc=2, worker=2, start=13.5, end=15.0, via="reclaim")

    report = log.report()

    assert len(report.explained_doubles) == int(explained)
    assert len(report.unexplained_doubles) == int(not explained)


def test_a_rerun_after_the_first_attempt_ended_is_not_a_double() -> None:
    log = Log()
    log.attempt(0, dc=1, worker=1, start=1.0, end=2.0)
    log.records.append(WorkerKilled(1, 2.5))  # before its ack landed
    log.attempt(0, dc=2, worker=2, start=6.5, end=7.0, via="reclaim")

    report = log.report()

    assert report.doubles == []
    [rerun] = report.reruns
    assert rerun.explanation == "its worker stopped before the ack"
    assert report.exit_status == 0


@pytest.mark.parametrize("outage", [1.5, None])
def test_a_rerun_after_success_with_the_worker_alive_is_an_unexplained_steal(
    outage: float | None,
) -> None:
    # The finished attempt's lease is heartbeated until its ack lands: with its worker
    # alive and no long outage, running the message again means the lease was stolen.
    log = Log()
    if outage is not None:
        log.outage(10.0, 10.0 + outage)
    log.attempt(0, dc=1, worker=1, start=8.0, end=9.9)
    log.attempt(0, dc=2, worker=2, start=12.0, end=13.0, via="reclaim")

    report = log.report()

    [rerun] = report.unexplained_reruns
    assert rerun.note.startswith("short outage" if outage else "no outage")
    assert report.exit_status == 1


@pytest.mark.parametrize(("outage_start", "explained"), [(9.0, True), (9.9 + 8.01, False)])
def test_a_long_outage_explains_a_rerun_only_while_the_ack_may_have_waited(
    outage_start: float, explained: bool
) -> None:
    log = Log()
    log.outage(outage_start, outage_start + 6.0)
    log.attempt(0, dc=1, worker=1, start=8.0, end=9.9)
    log.attempt(0, dc=2, worker=2, start=outage_start + 7.0, end=40.0, via="reclaim")

    report = log.report()

    assert len(report.reruns) == 1
    assert len(report.unexplained_reruns) == int(not explained)


def test_a_rerun_after_a_concurrent_double_is_judged_as_the_double() -> None:
    log = Log()
    log.outage(2.0, 8.0)
    log.attempt(0, dc=1, worker=1, start=1.0, end=12.0)  # its lease lapsed in the outage
    log.attempt(0, dc=2, worker=2, start=8.1, end=None)
    log.records.append(WorkerKilled(2, 9.0))
    log.attempt(0, dc=3, worker=1, start=15.0, end=16.0, via="reclaim")

    report = log.report()

    assert len(report.explained_doubles) == 1
    assert [r.explanation for r in report.reruns] == [
        "follows a concurrent double run (judged there)"
    ]
    assert report.exit_status == 0


def test_a_rerun_caused_by_a_false_lease_lost_is_counted_once() -> None:
    log = Log()
    log.attempt(0, dc=1, worker=1, start=1.0, end=2.0)
    log.lease_lost(0, dc=1, worker=1, at=1.5, text="lease lost: another worker may run this")
    log.attempt(0, dc=2, worker=2, start=5.5, end=6.0, via="reclaim")

    report = log.report()

    assert len(report.false_lease_lost) == 1
    assert [r.explanation for r in report.reruns] == ["a false lease-lost skipped the ack"]
    assert report.violations == 1


def test_a_lease_lost_for_an_attempt_nobody_took_over_is_false() -> None:
    log = Log()
    log.attempt(0, dc=1, worker=1, start=1.0, end=2.0)
    log.lease_lost(0, dc=1, worker=1, at=2.1, text="ack reported the lease lost; ...")

    report = log.report()

    [verdict] = report.false_lease_lost
    assert verdict.operation == "ack"
    assert verdict.note == "never delivered again"
    assert report.exit_status == 1


def test_a_lease_lost_after_another_worker_was_granted_the_message_is_real() -> None:
    log = Log()
    log.attempt(0, dc=1, worker=1, start=1.0, end=9.0)
    log.attempt(0, dc=2, worker=2, start=6.0, end=7.0, via="reclaim")
    log.lease_lost(0, dc=1, worker=1, at=6.5, text="lease lost: another worker may run this")

    report = log.report()

    assert [v.verdict for v in report.lease_losses] == ["taken_over"]
    assert report.false_lease_lost == []


def test_a_lease_lost_before_the_next_grant_was_even_asked_for_is_false() -> None:
    # The runner gave up a lease it still held; the message came back only after
    # that lease lapsed.
    log = Log()
    log.attempt(0, dc=1, worker=1, start=1.0, end=2.0)
    log.lease_lost(0, dc=1, worker=1, at=2.5, text="lease lost: another worker may run this")
    log.attempt(0, dc=2, worker=2, start=6.5, end=7.0, via="reclaim")

    report = log.report()

    [verdict] = report.false_lease_lost
    assert verdict.operation == "heartbeat"
    assert "invoked 3.99s after" in verdict.note


def test_a_grant_of_an_earlier_delivery_does_not_make_a_loss_real() -> None:
    log = Log()
    log.attempt(0, dc=1, worker=1, start=1.0, end=1.5, outcome="error")
    log.attempt(0, dc=2, worker=1, start=2.0, end=3.0)
    log.lease_lost(0, dc=2, worker=1, at=3.1, text="ack reported the lease lost; ...")

    report = log.report()

    assert len(report.false_lease_lost) == 1


def test_a_lease_lost_is_indeterminate_when_a_later_grant_was_never_observed() -> None:
    log = Log()
    log.outage(2.0, 8.0)  # long: the lease may lapse
    log.attempt(0, dc=1, worker=1, start=1.0, end=9.0)
    log.lease_lost(0, dc=1, worker=1, at=8.5, text="lease lost: another worker may run this")
    # Delivery 2 went to a worker that died before recording it; delivery 3 came later.
    log.attempt(0, dc=3, worker=3, start=12.0, end=13.0, via="reclaim")

    report = log.report()

    assert [v.verdict for v in report.lease_losses] == ["indeterminate"]
    assert report.exit_status == 0


def test_one_lease_loss_reported_twice_is_judged_once() -> None:
    log = Log()
    log.attempt(0, dc=1, worker=1, start=1.0, end=2.0)
    log.lease_lost(0, dc=1, worker=1, at=2.1, text="lease lost: another worker may run this")
    log.lease_lost(0, dc=1, worker=1, at=2.2, text="ack reported the lease lost; ...")

    report = log.report()

    assert len(report.lease_losses) == 1
    assert report.lease_losses[0].operation == "heartbeat"


def test_a_worker_whose_counted_lease_losses_were_not_all_logged_makes_the_run_inconclusive() -> (
    None
):
    log = Log()
    log.attempt(0, dc=1, worker=1, start=1.0, end=2.0)
    log.records.append(Stats(1, 3.0, {"lease_lost": 1}))

    report = log.report()

    assert report.exit_status == 3
    assert "log matcher missed" in report.instrument_errors[0]


def test_attempts_end_when_their_worker_was_killed_or_else_at_the_end_of_the_run() -> None:
    log = Log(jobs=2)
    log.attempt(0, dc=1, worker=1, start=1.0, end=None)
    log.records.append(WorkerKilled(1, 4.0))
    log.attempt(1, dc=1, worker=2, start=1.0, end=None)

    history = build_history([*log.records, Phase("end", 50.0)])

    ends = {(a.job, a.outcome): a.end for a in history.attempts}
    assert ends == {(0, "killed"): 4.0, (1, "unfinished"): 50.0}


def test_the_log_survives_a_torn_last_line(tmp_path: Path) -> None:
    writer = LogWriter(tmp_path / "worker-00001.jsonl")
    writer.write(Start(1, 0, "m0", 1, "c", 1.0))
    writer.close()
    with (tmp_path / "worker-00001.jsonl").open("ab") as file:
        file.write(b'{"e":"end","w":1,"job"')  # the writer died mid-line

    [found] = read_records(tmp_path)

    assert found.records == [Start(1, 0, "m0", 1, "c", 1.0)]
    assert found.torn_lines == 1
    assert check(
        build_history(found.records, torn_lines=found.torn_lines),
        lease_seconds=LEASE_SECONDS,
        safe_outage_seconds=SAFE,
    ).instrument_errors == ["1 torn record line(s) (a process died mid-write)"]


def test_the_time_leases_went_unconfirmed_across_an_outage_is_measured() -> None:
    log = Log()
    log.outage(2.0, 4.0)
    for t0, error in [(0.5, None), (1.5, None), (2.5, "refused"), (3.5, "refused"), (4.5, None)]:
        log.records.append(Beat(1, t0, t0 + 0.01, 3, 0, error))
    # Worker 2 held no lease during the outage (no heartbeat call failed).
    log.records += [Beat(2, 1.0, 1.01, 1, 0), Beat(2, 5.0, 5.01, 1, 0)]

    report = log.report()

    [gap] = report.heartbeat_gaps
    assert gap.worker == 1
    assert gap.seconds == pytest.approx(3.01)
    assert "up to 3.01s (0 of 1 >= lease) across short outages" in report.describe()


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "worker-00001.jsonl"
    writer = LogWriter(path)
    handler = LeaseLossRecorder(writer, worker=1)
    logging.getLogger().addHandler(handler)
    try:
        yield tmp_path
    finally:
        logging.getLogger().removeHandler(handler)
        writer.close()


async def test_the_worker_records_every_lease_loss_the_runner_counts(recorded: Path) -> None:
    # The real runner's lease keeper and executor: if their wording changes so that
    # the soak's matcher misses a counted loss, this fails (and so would the soak's
    # Stats cross-check).
    clock = FakeClock()
    app, queue = make(clock)
    stalled = BlockingHeartbeatQueue(queue)
    started = asyncio.Event()
    finish = asyncio.Event()
    owners: list[str] = []

    @app.task(max_retries=3)
    async def job() -> None:
        owners.append(current_task().consumer)
        started.set()
        await finish.wait()

    slow = Runner(stalled, app, config(), clock=clock)
    async with running(slow):
        message_id = await Producer(queue, app, clock=clock).dispatch(job)
        await clock.run_until(started.is_set, step=0.5, limit=5)
        stalled.gate.clear()
        other = Runner(queue.open_handle(), app, config(), clock=clock)
        async with running(other):
            await clock.run_until(lambda: len(owners) == 2, step=0.5, limit=3 * LEASE)
            stalled.gate.set()
            await clock.run_until(lambda: slow.stats().lease_lost == 1, step=0.5, limit=LEASE)
            finish.set()
            await clock.run_until(lambda: not queue.in_flight(), step=0.5, limit=LEASE)

    [found] = read_records(recorded)
    losses = [r for r in found.records if isinstance(r, LeaseLost)]
    assert {(r.msg, r.dc, r.consumer) for r in losses} == {(message_id, 1, owners[0])}
    assert slow.stats().lease_lost == 1
