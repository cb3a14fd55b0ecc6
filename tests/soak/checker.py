"""Judge a soak run from its completion log (Jepsen style): what happened, not what was said.

`build_history` turns the records of a run directory (see `tests.soak.records`) into
attempts, grants, lease losses and faults; `check` judges them:

* **Lost.** A job whose add was acknowledged but no attempt of it ever ended ``ok``
  (after the run drained). Jobs found in the dead letters are reported apart (a soak
  task never fails for good, so any dead letter is a defect too).
* **Concurrent double runs.** Two attempts of one message whose ``[start, end]``
  intervals overlap: the task's code ran in two places at once. An attempt cut short
  by a SIGKILL ends when its process was reaped, one cut short by a graceful stop
  when its code saw the cancellation. A double is *explained* only when something
  outside the queue's guarantee let the first lease lapse while its task ran: a
  Redis outage at least `safe_outage_seconds` long (``lease - heartbeat interval``,
  the documented bound) that the first attempt ran across and that ended at most a
  lease before the second began, or an event-loop stall of the first attempt's
  process at least that long. A worker SIGKILL never explains one: a killed
  worker's attempt has ended before anyone else may be granted its message.
* **False lease-lost.** A lease loss the runner logged (and counted) for an attempt
  nobody took over. The loss is real when some grant of the message with a higher
  delivery count was invoked before the loss was logged. It is *indeterminate* when
  a grant above the lost delivery count was never observed (its receive or reclaim
  raised, or its process died before recording it), so it may have come first.
  Otherwise it is false: the runner counted a loss that did not happen.
* **Unexplained re-runs.** A message run again after one of its attempts succeeded.
  At-least-once allows it when the ack never landed because the attempt's process
  died first, or an outage beyond the bound (or a stall) let the lease lapse while
  the ack waited, or a false lease-lost (already counted) skipped the ack. Otherwise
  the finished attempt's lease, heartbeated until its ack, was stolen (or the ack
  was lost): the same defect as a concurrent double, caught after the task's code
  had already returned.
* Also reported, not judged: messages added by a retried dispatch, attempts that
  never ended.

The checker compares times recorded by different processes on one machine's monotonic
clock, and every rule leans toward "not a violation" when the log cannot tell, so a
correct queue is never accused.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .records import (
    Beat,
    DeadLettered,
    Dispatched,
    DispatchError,
    End,
    Grant,
    GrantError,
    LeaseLost,
    Phase,
    Record,
    RedisDown,
    RedisUp,
    Stall,
    Start,
    Stats,
    WorkerExited,
    WorkerKilled,
    WorkerUp,
)

__all__ = [
    "Attempt",
    "Double",
    "History",
    "LeaseLossVerdict",
    "Outage",
    "Report",
    "build_history",
    "check",
]

Outcome = Literal["ok", "error", "cancelled", "killed", "exited", "unfinished"]
Verdict = Literal["taken_over", "indeterminate", "false"]

_END_OUTCOMES: dict[str, Outcome] = {"ok": "ok", "error": "error", "cancelled": "cancelled"}


@dataclass(frozen=True)
class Attempt:
    """One run of a task's code.

    `end` is the End record's time; without one, when the process was reaped after a
    SIGKILL (``killed``), exited (``exited``), or the end of the run (``unfinished``).
    """

    worker: int
    job: int
    message_id: str
    delivery_count: int
    consumer: str
    start: float
    end: float
    outcome: Outcome


@dataclass(frozen=True)
class Outage:
    """The Redis server was down (SIGKILLed) from `start` until it answered PING at `end`."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        """How long it lasted."""
        return self.end - self.start


@dataclass
class History:
    """Everything the records of one run say, indexed for the checks."""

    jobs: set[int] = field(default_factory=set)
    job_of_message: dict[str, int] = field(default_factory=dict)
    uncertain_dispatches: int = 0
    attempts: list[Attempt] = field(default_factory=list)
    grants: list[Grant] = field(default_factory=list)
    grant_errors: list[GrantError] = field(default_factory=list)
    beats: list[Beat] = field(default_factory=list)
    lease_lost: list[LeaseLost] = field(default_factory=list)
    stalls: list[Stall] = field(default_factory=list)
    outages: list[Outage] = field(default_factory=list)
    worker_kills: int = 0
    graceful_stops: int = 0
    worker_starts: int = 0
    dead: list[DeadLettered] = field(default_factory=list)
    stopped: dict[int, float] = field(default_factory=dict)
    stats: dict[int, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0
    stopped_at: float = 0.0
    ended_at: float = 0.0
    torn_lines: int = 0


def build_history(records: Iterable[Record], *, torn_lines: int = 0) -> History:
    """Collect `records` (of every file of a run, in any order) into a `History`."""
    history = History(torn_lines=torn_lines)
    starts: list[Start] = []
    ends: dict[tuple[int, str, int, str], End] = {}
    killed_at: dict[int, float] = {}
    exited_at: dict[int, float] = {}
    signalled: list[float] = []
    downs: list[float] = []
    ups: list[float] = []
    times: list[float] = []
    for record in records:
        match record:
            case Start():
                starts.append(record)
                times.append(record.t)
            case End():
                ends.setdefault((record.w, record.msg, record.dc, record.consumer), record)
                times.append(record.t)
            case Grant():
                history.grants.append(record)
            case GrantError():
                history.grant_errors.append(record)
            case Beat():
                history.beats.append(record)
            case LeaseLost():
                history.lease_lost.append(record)
            case Stall():
                history.stalls.append(record)
            case Stats():
                history.stats[record.w] = record.stats
            case Dispatched():
                history.jobs.update(record.jobs)
                history.job_of_message.update(zip(record.msgs, record.jobs, strict=True))
                times.append(record.t1)
            case DispatchError():
                history.uncertain_dispatches += len(record.jobs)
            case WorkerUp():
                history.worker_starts += 1
            case WorkerKilled():
                killed_at[record.w] = record.t
                history.worker_kills += 1
            case WorkerExited():
                exited_at[record.w] = record.t
                if record.t_signal is not None:
                    signalled.append(record.t_signal)
            case RedisDown():
                downs.append(record.t)
            case RedisUp():
                ups.append(record.t)
            case Phase():
                if record.name == "faults":
                    history.started_at = record.t
                    history.settings.update(record.settings)
                elif record.name == "stop":
                    history.stopped_at = record.t
                elif record.name == "end":
                    history.ended_at = record.t
            case DeadLettered():
                history.dead.append(record)
    if not history.ended_at:
        history.ended_at = max(times, default=0.0)
    # The final stop of every worker is no fault.
    stopped_at = history.stopped_at or history.ended_at
    history.graceful_stops = sum(t < stopped_at for t in signalled)
    history.outages = _pair_outages(sorted(downs), sorted(ups), history.ended_at)
    for start in starts:
        key = (start.w, start.msg, start.dc, start.consumer)
        history.attempts.append(_attempt(start, ends.get(key), killed_at, exited_at, history))
    history.attempts.sort(key=lambda a: a.start)
    history.stopped = {**exited_at, **killed_at}
    return history


def _pair_outages(downs: list[float], ups: list[float], ended_at: float) -> list[Outage]:
    outages = []
    for down in downs:
        i = bisect.bisect_left(ups, down)
        outages.append(Outage(down, ups[i] if i < len(ups) else max(ended_at, down)))
    return outages


def _attempt(
    start: Start,
    end: End | None,
    killed_at: dict[int, float],
    exited_at: dict[int, float],
    history: History,
) -> Attempt:
    outcome: Outcome
    if end is not None:
        finished = end.t
        outcome = _END_OUTCOMES.get(end.outcome, "error")
    elif start.w in killed_at:
        finished, outcome = killed_at[start.w], "killed"
    elif start.w in exited_at:
        finished, outcome = exited_at[start.w], "exited"
    else:
        finished, outcome = max(history.ended_at, start.t), "unfinished"
    return Attempt(
        worker=start.w,
        job=start.job,
        message_id=start.msg,
        delivery_count=start.dc,
        consumer=start.consumer,
        start=start.t,
        end=finished,
        outcome=outcome,
    )


@dataclass(frozen=True)
class Double:
    """Two attempts of one message that ran at the same time (`first` started first)."""

    first: Attempt
    second: Attempt
    explanation: str | None
    note: str

    @property
    def overlap_seconds(self) -> float:
        """How long both ran."""
        return min(self.first.end, self.second.end) - self.second.start


@dataclass(frozen=True)
class HeartbeatGap:
    """How long one worker's leases went unconfirmed across one outage.

    From the invocation of its last successful heartbeat before the outage to the
    return of its first successful one after: an upper bound on how old its leases
    looked to the server, which may reclaim them once that exceeds the lease.
    """

    outage: Outage
    worker: int
    seconds: float


@dataclass(frozen=True)
class Rerun:
    """A message run again (`second`) after an attempt of it succeeded (`first`)."""

    first: Attempt
    second: Attempt
    explanation: str | None
    note: str


@dataclass(frozen=True)
class LeaseLossVerdict:
    """Whether a logged lease loss was real."""

    event: LeaseLost
    verdict: Verdict
    operation: str
    near_outage: bool
    note: str


@dataclass
class Report:
    """The verdict on one run."""

    jobs: int
    messages: int
    attempts: int
    duration_seconds: float
    worker_kills: int
    graceful_stops: int
    worker_starts: int
    outages: list[Outage]
    safe_outage_seconds: float
    lost: list[int]
    dead: list[DeadLettered]
    doubles: list[Double]
    lease_losses: list[LeaseLossVerdict]
    reruns: list[Rerun]
    heartbeat_gaps: list[HeartbeatGap]
    lease_seconds: float
    recovered_messages: int
    unfinished_attempts: int
    max_stall_seconds: float
    instrument_errors: list[str]

    @property
    def unexplained_doubles(self) -> list[Double]:
        """Concurrent double runs nothing outside the guarantee explains."""
        return [d for d in self.doubles if d.explanation is None]

    @property
    def explained_doubles(self) -> list[Double]:
        """Concurrent double runs after a long outage or a stall."""
        return [d for d in self.doubles if d.explanation is not None]

    @property
    def unexplained_reruns(self) -> list[Rerun]:
        """Re-runs after success that no fault explains: a lease stolen or an ack lost."""
        return [r for r in self.reruns if r.explanation is None]

    @property
    def false_lease_lost(self) -> list[LeaseLossVerdict]:
        """Lease losses counted for attempts nobody took over."""
        return [v for v in self.lease_losses if v.verdict == "false"]

    @property
    def violations(self) -> int:
        """Lost jobs, dead letters, unexplained doubles and re-runs, false lease losses."""
        return (
            len(self.lost)
            + len(self.dead)
            + len(self.unexplained_doubles)
            + len(self.unexplained_reruns)
            + len(self.false_lease_lost)
        )

    @property
    def exit_status(self) -> int:
        """0 clean, 1 a guarantee was broken, 3 the run could not be judged."""
        if self.violations:
            return 1
        return 3 if self.instrument_errors else 0

    def describe(self, *, examples: int = 5) -> str:
        """A report for people."""
        short = [o for o in self.outages if o.seconds < self.safe_outage_seconds]
        long = [o for o in self.outages if o.seconds >= self.safe_outage_seconds]
        verdicts: dict[str, int] = defaultdict(int)
        for loss in self.lease_losses:
            verdicts[loss.verdict] += 1
        unexplained = self.unexplained_doubles
        lines = [
            "soak report",
            f"  jobs                     {self.jobs} ({self.messages} messages, "
            f"{self.attempts} attempts, {self.recovered_messages} added by retried dispatches)",
            f"  duration                 {self.duration_seconds:.0f}s",
            f"  worker faults            {self.worker_kills} SIGKILL, "
            f"{self.graceful_stops} SIGTERM; {self.worker_starts} worker starts",
            f"  redis SIGKILL+restart    {len(self.outages)}: {len(short)} below "
            f"{self.safe_outage_seconds:g}s ({_span(short)}), "
            f"{len(long)} at or above ({_span(long)})",
            f"  longest event-loop stall {self.max_stall_seconds:.2f}s",
            f"  leases unconfirmed       {self._gaps(short)} across short outages, "
            f"{self._gaps(long)} across long ones (lease {self.lease_seconds:g}s)",
            "",
            f"  lost                     {len(self.lost)}",
            f"  dead-lettered            {len(self.dead)}",
            f"  concurrent double runs   {len(self.doubles)}: {len(unexplained)} unexplained, "
            f"{len(self.explained_doubles)} explained",
            f"  lease lost (logged)      {len(self.lease_losses)}: "
            f"{verdicts['taken_over']} taken over, {verdicts['false']} false, "
            f"{verdicts['indeterminate']} indeterminate",
            f"  false lease-lost         {len(self.false_lease_lost)}",
            f"  re-runs after success    {len(self.reruns)}: "
            f"{len(self.unexplained_reruns)} unexplained, "
            f"{len(self.reruns) - len(self.unexplained_reruns)} explained",
            f"  attempts never ended     {self.unfinished_attempts}",
        ]
        if self.lost:
            lines.append(f"  lost jobs: {self.lost[:20]}{' ...' if len(self.lost) > 20 else ''}")
        for dead in self.dead[:examples]:
            lines.append(f"  dead letter: job {dead.job} msg {dead.msg}: {dead.reason}")
        if unexplained:
            lines.append("  unexplained concurrent double runs (examples):")
            lines += [
                f"    {_describe_double(d)}; overlap {d.overlap_seconds:.2f}s"
                for d in unexplained[:examples]
            ]
            lines.append(f"    by cause: {_tally(d.note.split(':')[0] for d in unexplained)}")
        if self.explained_doubles:
            lines.append(
                "  double runs explained: "
                + _tally(d.explanation or "" for d in self.explained_doubles)
            )
        if self.unexplained_reruns:
            lines.append("  unexplained re-runs after success (examples):")
            lines += [f"    {_describe_double(r)}" for r in self.unexplained_reruns[:examples]]
            lines.append(
                f"    by cause: {_tally(r.note.split(':')[0] for r in self.unexplained_reruns)}"
            )
        explained_reruns = [r for r in self.reruns if r.explanation is not None]
        if explained_reruns:
            lines.append(
                f"  re-runs explained: {_tally(r.explanation or '' for r in explained_reruns)}"
            )
        false = self.false_lease_lost
        if false:
            lines.append("  false lease-lost (examples):")
            lines += [f"    {_describe_loss(v)}" for v in false[:examples]]
            lines.append(
                f"    by operation: {_tally(v.operation for v in false)}; "
                f"near a Redis outage: {sum(v.near_outage for v in false)}"
            )
        for error in self.instrument_errors:
            lines.append(f"  INSTRUMENT: {error}")
        verdict = {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}[self.exit_status]
        lines.append(f"  verdict                  {verdict}")
        return "\n".join(lines)

    def _gaps(self, outages: Sequence[Outage]) -> str:
        gaps = [g.seconds for g in self.heartbeat_gaps if g.outage in outages]
        if not gaps:
            return "-"
        over = sum(gap >= self.lease_seconds for gap in gaps)
        return f"up to {max(gaps):.2f}s ({over} of {len(gaps)} >= lease)"


def _span(outages: Sequence[Outage]) -> str:
    if not outages:
        return "-"
    seconds = [o.seconds for o in outages]
    return f"{min(seconds):.1f}-{max(seconds):.1f}s"


def _tally(values: Iterable[str]) -> str:
    counts: dict[str, int] = defaultdict(int)
    for value in values:
        counts[value] += 1
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _describe_double(pair: Double | Rerun) -> str:
    a, b = pair.first, pair.second
    return (
        f"msg {a.message_id} job {a.job}: dc {a.delivery_count} on w{a.worker} "
        f"[{a.start:.2f}, {a.end:.2f}] {a.outcome}, dc {b.delivery_count} on w{b.worker} "
        f"from {b.start:.2f}; {pair.note}"
    )


def _describe_loss(verdict: LeaseLossVerdict) -> str:
    e = verdict.event
    return f"msg {e.msg} dc {e.dc} on w{e.w} at {e.t:.2f} by {verdict.operation}; {verdict.note}"


def check(
    history: History,
    *,
    lease_seconds: float,
    safe_outage_seconds: float,
) -> Report:
    """Judge `history` (see the module docstring for every rule).

    Args:
        history: The run.
        lease_seconds: The workers' lease.
        safe_outage_seconds: Outages shorter than this must not cause double runs
            (the documented bound: lease minus one heartbeat interval).
    """
    by_message: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in history.attempts:
        by_message[attempt.message_id].append(attempt)
    ok_jobs = {a.job for a in history.attempts if a.outcome == "ok"}
    dead_jobs = {d.job for d in history.dead}
    lost = sorted(history.jobs - ok_jobs - dead_jobs)
    doubles = [
        double
        for attempts in by_message.values()
        for double in _doubles(attempts, history, lease_seconds, safe_outage_seconds)
    ]
    lease_losses = _judge_lease_losses(history, lease_seconds)
    falsely_lost = {
        (v.event.w, v.event.msg, v.event.dc) for v in lease_losses if v.verdict == "false"
    }
    reruns = [
        rerun
        for attempts in by_message.values()
        if (rerun := _rerun(attempts, history, falsely_lost, lease_seconds, safe_outage_seconds))
    ]
    return Report(
        jobs=len(history.jobs),
        messages=len(by_message),
        attempts=len(history.attempts),
        duration_seconds=history.ended_at - history.started_at,
        worker_kills=history.worker_kills,
        graceful_stops=history.graceful_stops,
        worker_starts=history.worker_starts,
        outages=history.outages,
        safe_outage_seconds=safe_outage_seconds,
        lost=lost,
        dead=history.dead,
        doubles=doubles,
        lease_losses=lease_losses,
        reruns=reruns,
        heartbeat_gaps=_heartbeat_gaps(history),
        lease_seconds=lease_seconds,
        recovered_messages=sum(m not in history.job_of_message for m in by_message),
        unfinished_attempts=sum(a.outcome == "unfinished" for a in history.attempts),
        max_stall_seconds=max((s.t1 - s.t0 for s in history.stalls), default=0.0),
        instrument_errors=_instrument_errors(history, lease_losses),
    )


def _doubles(
    attempts: list[Attempt],
    history: History,
    lease_seconds: float,
    safe_outage_seconds: float,
) -> list[Double]:
    found = []
    ordered = sorted(attempts, key=lambda a: a.start)
    for i, first in enumerate(ordered):
        for second in ordered[i + 1 :]:
            if second.start >= first.end:
                continue
            explanation = _explain(first, second, history, lease_seconds, safe_outage_seconds)
            note = _context(second, history, lease_seconds, safe_outage_seconds)
            found.append(Double(first, second, explanation, note))
    return found


def _explain(
    first: Attempt,
    second: Attempt,
    history: History,
    lease_seconds: float,
    safe_outage_seconds: float,
) -> str | None:
    for outage in history.outages:
        if (
            outage.seconds >= safe_outage_seconds
            and first.start < outage.end <= second.start <= outage.end + lease_seconds
        ):
            return f"redis outage >= {safe_outage_seconds:g}s"
    for stall in history.stalls:
        if (
            stall.w == first.worker
            and stall.t1 - stall.t0 >= safe_outage_seconds
            and stall.t0 < second.start
            and stall.t1 > first.start
        ):
            return f"event-loop stall >= {safe_outage_seconds:g}s"
    return None


def _context(
    second: Attempt, history: History, lease_seconds: float, safe_outage_seconds: float
) -> str:
    """What preceded `second`: the likeliest culprit, for people reading the report."""
    for outage in reversed(history.outages):
        if outage.end <= second.start <= outage.end + 2 * lease_seconds:
            kind = "short" if outage.seconds < safe_outage_seconds else "long"
            return (
                f"{kind} outage: started {second.start - outage.end:.2f}s after a "
                f"{outage.seconds:.2f}s Redis outage"
            )
    return "no outage: no Redis outage in the two leases before"


def _heartbeat_gaps(history: History) -> list[HeartbeatGap]:
    """For each outage and each worker whose heartbeats failed in it, the unconfirmed time."""
    by_worker: dict[int, list[Beat]] = defaultdict(list)
    for beat in history.beats:
        by_worker[beat.w].append(beat)
    gaps = []
    for outage in history.outages:
        for worker, beats in by_worker.items():
            failed = [
                b for b in beats if b.error is not None and outage.start <= b.t0 <= outage.end
            ]
            if not failed:
                continue  # it held no lease during the outage
            ok = [b for b in beats if b.error is None]
            before = [b for b in ok if b.t0 < outage.start]
            after = [b for b in ok if b.t1 > outage.start and b.t0 > failed[0].t0]
            if before and after:
                seconds = min(b.t1 for b in after) - max(b.t0 for b in before)
                gaps.append(HeartbeatGap(outage, worker, seconds))
    return gaps


def _judge_lease_losses(history: History, lease_seconds: float) -> list[LeaseLossVerdict]:
    grants: dict[str, list[Grant]] = defaultdict(list)
    for grant in history.grants:
        grants[grant.msg].append(grant)
    seen_counts: dict[str, set[int]] = defaultdict(set)
    for grant in history.grants:
        seen_counts[grant.msg].add(grant.dc)
    for attempt in history.attempts:
        seen_counts[attempt.message_id].add(attempt.delivery_count)
    first_report: dict[tuple[int, str, int, str], LeaseLost] = {}
    for event in sorted(history.lease_lost, key=lambda e: e.t):
        first_report.setdefault((event.w, event.msg, event.dc, event.consumer), event)
    verdicts = []
    for event in first_report.values():
        later = [g for g in grants[event.msg] if g.dc > event.dc]
        before = [g for g in later if g.t0 < event.t]
        counts = seen_counts[event.msg]
        highest = max(counts | {event.dc})
        unseen = [dc for dc in range(event.dc + 1, highest + 1) if dc not in counts]
        verdict: Verdict
        if before:
            g = min(before, key=lambda g: g.t0)
            verdict, note = "taken_over", f"dc {g.dc} granted to w{g.w} by {g.via}"
        elif unseen:
            verdict, note = "indeterminate", f"delivery count {unseen[0]} was never observed"
        elif later:
            g = min(later, key=lambda g: g.t0)
            verdict = "false"
            note = f"next grant (dc {g.dc}) invoked {g.t0 - event.t:.2f}s after the loss"
        else:
            verdict, note = "false", "never delivered again"
        near = any(o.start <= event.t <= o.end + lease_seconds for o in history.outages)
        verdicts.append(LeaseLossVerdict(event, verdict, _operation(event), near, note))
    return verdicts


def _operation(event: LeaseLost) -> str:
    if event.source.endswith("heartbeat"):
        return "heartbeat"
    word = event.text.split(" ", 1)[0]
    return word if word in ("ack", "release", "dead_letter") else "other"


def _rerun(
    attempts: list[Attempt],
    history: History,
    falsely_lost: set[tuple[int, str, int]],
    lease_seconds: float,
    safe_outage_seconds: float,
) -> Rerun | None:
    ok = [a for a in attempts if a.outcome == "ok"]
    if not ok:
        return None
    first = min(ok, key=lambda a: a.end)
    later = [a for a in attempts if a is not first and a.start >= first.end]
    if not later:
        return None
    second = min(later, key=lambda a: a.start)
    note = _context(second, history, lease_seconds, safe_outage_seconds)
    return Rerun(
        first,
        second,
        _explain_rerun(
            attempts, first, second, history, falsely_lost, lease_seconds, safe_outage_seconds
        ),
        note,
    )


def _explain_rerun(
    attempts: list[Attempt],
    first: Attempt,
    second: Attempt,
    history: History,
    falsely_lost: set[tuple[int, str, int]],
    lease_seconds: float,
    safe_outage_seconds: float,
) -> str | None:
    """Why the succeeded attempt's ack may never have landed (None: nothing explains it).

    A message whose succeeded attempt overlapped another was judged as a concurrent
    double run already. Otherwise, until its ack lands a finished attempt's lease is
    heartbeated, so only its process dying first, an outage beyond the bound while the
    ack waited (the acker backs off up to 5 s, so allow two leases), a stall, or a lease
    loss already counted as false (which skips the ack) let the message run again.
    """
    if any(a is not first and a.start < first.end and a.end > first.start for a in attempts):
        return "follows a concurrent double run (judged there)"
    stopped = history.stopped.get(first.worker)
    if stopped is not None and first.end <= stopped <= second.start:
        return "its worker stopped before the ack"
    for outage in history.outages:
        if (
            outage.seconds >= safe_outage_seconds
            and outage.start <= first.end + 2 * lease_seconds
            and outage.end <= second.start <= outage.end + lease_seconds
        ):
            return f"redis outage >= {safe_outage_seconds:g}s"
    for stall in history.stalls:
        if (
            stall.w == first.worker
            and stall.t1 - stall.t0 >= safe_outage_seconds
            and stall.t1 > first.end
            and stall.t0 < second.start
        ):
            return f"event-loop stall >= {safe_outage_seconds:g}s"
    if (first.worker, first.message_id, first.delivery_count) in falsely_lost:
        return "a false lease-lost skipped the ack"
    return None


def _instrument_errors(history: History, losses: list[LeaseLossVerdict]) -> list[str]:
    errors = []
    if history.torn_lines:
        errors.append(f"{history.torn_lines} torn record line(s) (a process died mid-write)")
    logged: dict[int, int] = defaultdict(int)
    for loss in losses:
        logged[loss.event.w] += 1
    for worker, stats in sorted(history.stats.items()):
        counted = stats.get("lease_lost")
        if counted != logged[worker]:
            errors.append(
                f"worker w{worker} counted lease_lost={counted} but logged "
                f"{logged[worker]} lease loss(es): the log matcher missed some"
            )
    return errors
