"""Schedules: definition checks, next instants (cron with seconds, DST, every) and the
catch-up policies after a gap.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import msgspec
import pytest

from taskrunner import App, ConfigurationError, PayloadTooLargeError, PayloadValidationError
from taskrunner.schedules import CATCH_UP_LIMIT, Schedule, Timing

PARIS = ZoneInfo("Europe/Paris")


class Report(msgspec.Struct):
    kind: str


def ts(*args: int, tz: ZoneInfo | None = None, fold: int = 0) -> float:
    year, month, day, *rest = args
    hour, minute, second = (*rest, 0, 0, 0)[:3]
    return datetime(year, month, day, hour, minute, second, tzinfo=tz or UTC, fold=fold).timestamp()


def app_with_task() -> tuple[App, object]:
    app = App("sched")

    @app.task(name="report")
    async def report(payload: Report) -> None: ...

    return app, report


# --- definition -----------------------------------------------------------------


def test_schedule_is_defined_with_validated_payload_and_listed() -> None:
    app, _ = app_with_task()

    schedule = app.schedule(
        "nightly", "report", cron="0 3 * * *", payload=Report(kind="sales"), timezone="Europe/Paris"
    )

    assert app.schedules == {"nightly": schedule}
    assert schedule.task_name == "report"
    assert msgspec.json.decode(schedule.payload) == {"kind": "sales"}
    assert schedule.catch_up == "latest"


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"cron": "0 3 * * *", "every": 60}, "cron"),
        ({}, "cron"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"every": 0.5}, "every"),
        ({"every": timedelta(0)}, "every"),
        ({"every": float("inf")}, "every"),
        ({"every": True}, "every"),
        ({"every": 60, "catch_up": "some"}, "catch_up"),
    ],
)
def test_bad_definitions_are_refused_with_the_setting(
    kwargs: dict[str, object], setting: str
) -> None:
    app, _ = app_with_task()

    with pytest.raises(ConfigurationError) as caught:
        app.schedule("s", "report", payload=Report(kind="x"), **kwargs)  # type: ignore[arg-type]

    assert caught.value.setting == setting
    assert app.schedules == {}


def test_payload_is_checked_against_the_task_type_at_definition() -> None:
    app, _ = app_with_task()

    with pytest.raises(PayloadValidationError):
        app.schedule("s", "report", every=60, payload={"kind": 3})
    with pytest.raises(PayloadValidationError):
        app.schedule("s", "report", every=60)  # the task needs a payload


def test_payload_too_large_for_a_message_is_refused_at_definition() -> None:
    app = App("sched", max_message_bytes=200)

    @app.task(name="big")
    async def big(payload: str) -> None: ...

    app.schedule("fits", big, every=60, payload="x" * 20)
    with pytest.raises(PayloadTooLargeError):
        app.schedule("too-big", big, every=60, payload="x" * 200)


def test_duplicate_names_and_foreign_tasks_are_refused() -> None:
    app, _ = app_with_task()
    other = App("other")

    @other.task(name="foreign")
    async def foreign() -> None: ...

    app.schedule("s", "report", every=60, payload=Report(kind="x"))
    with pytest.raises(ConfigurationError):
        app.schedule("s", "report", every=120, payload=Report(kind="x"))
    with pytest.raises(ConfigurationError):
        app.schedule("t", foreign, every=60)
    with pytest.raises(ConfigurationError):
        app.schedule("has space", "report", every=60, payload=Report(kind="x"))


# --- next instants ---------------------------------------------------------------


def cron(expr: str, zone: str = "UTC") -> Timing:
    return Timing.build("t", cron=expr, every=None, timezone=zone)


def test_cron_next_is_strictly_after_the_given_instant() -> None:
    timing = cron("*/5 * * * *")

    assert timing.next_after(ts(2026, 1, 1, 0, 4, 59)) == ts(2026, 1, 1, 0, 5)
    assert timing.next_after(ts(2026, 1, 1, 0, 5)) == ts(2026, 1, 1, 0, 10)
    assert timing.next_after(ts(2026, 1, 1, 0, 5) - 0.001) == ts(2026, 1, 1, 0, 5)


def test_six_fields_read_the_first_as_seconds() -> None:
    timing = cron("*/15 * * * * *")

    assert timing.next_after(ts(2026, 1, 1, 0, 0, 0)) == ts(2026, 1, 1, 0, 0, 15)
    assert timing.next_after(ts(2026, 1, 1, 0, 0, 44)) == ts(2026, 1, 1, 0, 0, 45)
    assert timing.next_after(ts(2026, 1, 1, 0, 0, 45)) == ts(2026, 1, 1, 0, 1, 0)


def test_cron_is_read_in_its_time_zone() -> None:
    timing = cron("0 9 * * *", "Europe/Paris")

    # 09:00 in Paris is 08:00 UTC in winter, 07:00 UTC in summer.
    assert timing.next_after(ts(2026, 1, 10)) == ts(2026, 1, 10, 8)
    assert timing.next_after(ts(2026, 7, 10)) == ts(2026, 7, 10, 7)


def test_daily_job_in_the_skipped_hour_runs_once_right_after_the_spring_change() -> None:
    # 2026-03-29 in Paris: 02:00 local jumps to 03:00; 02:30 does not exist that day.
    timing = cron("30 2 * * *", "Europe/Paris")
    start = ts(2026, 3, 28, 12, tz=PARIS)

    first = timing.next_after(start)
    second = timing.next_after(first)

    assert first == ts(2026, 3, 29, 3, 0, tz=PARIS)
    assert second == ts(2026, 3, 30, 2, 30, tz=PARIS)


def test_daily_job_in_the_repeated_hour_runs_once_at_the_autumn_change() -> None:
    # 2026-10-25 in Paris: 03:00 local goes back to 02:00; 02:30 happens twice.
    timing = cron("30 2 * * *", "Europe/Paris")
    first = timing.next_after(ts(2026, 10, 24, 12, tz=PARIS))
    second = timing.next_after(first)

    assert first == ts(2026, 10, 25, 2, 30, tz=PARIS, fold=0)
    assert second == ts(2026, 10, 26, 2, 30, tz=PARIS)
    assert second - first == 25 * 3600


def test_half_hourly_job_runs_in_both_copies_of_the_repeated_hour() -> None:
    timing = cron("*/30 * * * *", "Europe/Paris")
    instants, _ = timing.between(
        ts(2026, 10, 25, 1, 45, tz=PARIS), ts(2026, 10, 25, 3, 0, tz=PARIS), limit=10
    )

    # UTC 00:00, 00:30 (02:00, 02:30 summer time), 01:00, 01:30 (winter), 02:00 (03:00).
    assert instants == [
        ts(2026, 10, 25, h, m) for h, m in [(0, 0), (0, 30), (1, 0), (1, 30), (2, 0)]
    ]


def test_every_counts_multiples_of_its_period_from_the_epoch() -> None:
    timing = Timing.build("t", cron=None, every=timedelta(hours=1), timezone="UTC")

    assert timing.next_after(ts(2026, 1, 1, 10, 59, 59)) == ts(2026, 1, 1, 11)
    assert timing.next_after(ts(2026, 1, 1, 11)) == ts(2026, 1, 1, 12)
    assert Timing.build("t", cron=None, every=1.5, timezone="UTC").next_after(3.0) == 4.5


# --- catch-up --------------------------------------------------------------------


def sched(catch_up: str, expr: str | None = None, every: float | None = 10.0) -> Schedule:
    timing = (
        Timing.build("s", cron=expr, every=None, timezone="UTC")
        if expr
        else Timing.build("s", cron=None, every=every, timezone="UTC")
    )
    return Schedule(name="s", task_name="t", payload=b"null", timing=timing, catch_up=catch_up)  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", ["latest", "all", "none"])
def test_instants_of_the_current_term_fire_under_every_policy(policy: str) -> None:
    # The leader took office at 100: 110, 120 are its own, even reached late.
    assert sched(policy).due(100.0, 110.0, missed_until=100.0) == ([110.0], 0)
    assert sched(policy).due(100.0, 125.0, missed_until=100.0) == ([110.0, 120.0], 0)
    assert sched(policy).due(100.0, 109.999, missed_until=100.0) == ([], 0)


def test_latest_fires_only_the_most_recent_missed_instant() -> None:
    # Last fired 100; the leader took office at 165 and now it is 172.
    assert sched("latest").due(100.0, 172.0, missed_until=165.0) == ([160.0, 170.0], 5)


def test_all_fires_each_missed_instant_in_order() -> None:
    assert sched("all").due(100.0, 172.0, missed_until=165.0) == (
        [110.0, 120.0, 130.0, 140.0, 150.0, 160.0, 170.0],
        0,
    )


def test_none_skips_missed_instants_but_fires_the_terms_own() -> None:
    assert sched("none").due(100.0, 165.0, missed_until=165.0) == ([], 6)
    assert sched("none").due(100.0, 172.0, missed_until=165.0) == ([170.0], 6)


def test_an_instant_exactly_at_taking_office_counts_as_missed() -> None:
    assert sched("none").due(100.0, 110.0, missed_until=110.0) == ([], 1)
    assert sched("none").due(100.0, 110.0, missed_until=109.999) == ([110.0], 0)


def test_all_is_capped_to_the_latest_instants_after_a_long_gap() -> None:
    instants, skipped = sched("all", every=1.0).due(0.0, 5000.0, missed_until=4990.0)

    assert instants == [float(i) for i in range(5001 - CATCH_UP_LIMIT, 5001)]
    assert skipped == 5000 - CATCH_UP_LIMIT


def test_cron_catch_up_after_a_day_of_per_second_instants_is_quick_and_exact() -> None:
    schedule = sched("all", expr="* * * * * *")
    start = ts(2026, 1, 1)
    began = time.perf_counter()

    instants, skipped = schedule.due(start, start + 86_400, missed_until=start + 86_400)

    assert time.perf_counter() - began < 5.0
    assert instants == [start + 86_400 - CATCH_UP_LIMIT + 1 + i for i in range(CATCH_UP_LIMIT)]
    assert skipped > 0


def test_cron_latest_after_a_gap() -> None:
    schedule = sched("latest", expr="*/5 * * * *")
    start = ts(2026, 1, 1)

    assert schedule.due(start, start + 3600 + 60, missed_until=start + 3600 + 60) == (
        [start + 3600],
        11,
    )
