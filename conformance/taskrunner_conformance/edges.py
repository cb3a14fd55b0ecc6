"""Probing a timed edge just inside and just outside it, deterministically, in every time mode.

The Boundaries paragraph of `taskrunner.queue` lets a backend be off by
``p = Capabilities.lease_precision_seconds`` either way: a lease is live at every idle
time below ``lease - p`` and lapsed above ``lease + p``; a delay is not over before
``delay - p`` and is over after ``delay + p``. The suite applies the same ``p`` to every
duration a backend measures (waits, registry TTLs, consumer idle thresholds). An edge
check probes each *subject* (a lease, a released message, a registry entry...) twice:
once just before its edge ("before": it must not have changed yet) and once just after
it ("after": it must have changed).

How "just" is made certain depends on the time mode:

* **clock** (a fake clock): the clock is moved to exactly ``edge - p - eps`` and
  ``edge + p + eps``, with ``eps`` a thousandth of the edge, so a backend off by more
  than 0.1 % fails. Before the first subject the clock is moved `CLOCK_HEAD_START`
  seconds, so no edge sits near zero (an implementation comparing the clock with a
  sequence number, or adding where it should subtract, shows).
* **real** and **age** (real time, which runs on during every call): each event that
  starts a subject's time (a grant, heartbeat, release, publish...) is bracketed by
  the suite's monotonic clock (a `Mark`), and so is each probe. At a probe the elapsed
  time therefore lies in ``[probe start - mark end, probe end - mark start]``; after
  the ``age_lease`` hook, in ``[the age given, the age given + probe end - mark
  start]`` (the hook may set the idle time or add to it, see `AgesLeases`, so every
  subject is aged at most once). Probes aim a slack ``d`` inside and outside the
  allowance (`Edges.slack`). A "before" probe counts only when its whole interval lies
  in ``[edge - p - 2d, edge - p)``, an "after" probe only when the change was seen by
  ``edge + p + 2d``; so a backend off by more than ``p + 2d`` always fails, and one
  that is right never does. A probe that real time pushed out of its window (the
  machine was slow) is retried on fresh subjects in a fresh queue, `ATTEMPTS` times,
  and then fails saying the machine was too slow: never a silent pass or a skip.

With the ``age_lease`` hook, leases need no waiting at all: for each spec one subject
is aged just below its edge right after it was made and probed at once, and a second
one is aged just past it and probed at once.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

from taskrunner.queue import Delivery, Queue

from .harness import AgesLeases
from .scenario import Scenario
from .settings import TIME_SCALE_ENV, time_scale

__all__ = [
    "ATTEMPTS",
    "CLOCK_EPSILON",
    "CLOCK_HEAD_START",
    "Edges",
    "Mark",
    "Role",
    "Spec",
    "Subject",
    "Trial",
    "Wording",
    "check_edges",
    "conclusively",
    "settle_task",
]

# On a fake clock, probes sit this fraction of the edge inside and outside it.
CLOCK_EPSILON = 1e-3

# On real time, probes aim max(SLACK_SECONDS * time scale, SLACK_FRACTION * lease)
# inside the edge; a probe slower than that is inconclusive and retried.
SLACK_SECONDS = 0.010
SLACK_FRACTION = 0.03

# Fresh tries for subjects whose "before" probe real time made inconclusive.
ATTEMPTS = 5

# Seconds a fake clock is moved before the first subject, so no edge sits near zero.
# Moderate on purpose: a harness whose backend runs periodic timers on the fake clock
# fires each of them once per period of this span.
CLOCK_HEAD_START = 10_000.0

T = TypeVar("T")
EngineMode = Literal["clock", "age", "real"]


@dataclass(frozen=True)
class Mark:
    """When a subject's time started: the suite's clock just before and just after the call.

    On a fake clock both are the same instant.
    """

    start: float
    end: float


class Wording(NamedTuple):
    """How failure messages describe one kind of subject.

    Attributes:
        crossed: What happened at the edge, as a past participle phrase ("was reclaimed").
        not_crossed: What had not happened yet ("was still live").
        elapsed: The name of the time measured from the mark ("idle time").
    """

    crossed: str
    not_crossed: str
    elapsed: str


@dataclass(frozen=True)
class Spec:
    """What one subject should be: its edge and how a trial makes it.

    Attributes:
        edge: Seconds after the subject's mark at which it changes (a lease length,
            a delay, a TTL, an idle threshold).
        label: Names the subject in failure messages ("a lease of 11.1s granted by receive").
        how: Which kind of subject the trial makes (trial-specific).
        lead: A trial-specific duration used while making it (time to let pass first,
            a first lease...).
        before: Whether the edge must be probed from before; False for edges that may
            be too close to zero for that (a delay of 0).
    """

    edge: float
    label: str
    how: str = ""
    lead: float = 0.0
    before: bool = True


Role = Literal["both", "before", "after"]


@dataclass(eq=False)
class Subject:
    """One subject under test, as a trial made it.

    Attributes:
        key: What the trial's probe reports it by (a message id, a name).
        spec: The spec it was made from.
        mark: When its time started.
        delivery: The delivery holding it, for leases (aged through the hook).
        queue: The handle the ``age_lease`` hook is given for it.
        count: The delivery count it had when made (leases), for count checks.
        role: Which edge probes it answers for (set by the engine): ``both``, or, when
            aged by the hook, only ``before`` or only ``after``.
        age: The idle seconds the ``age_lease`` hook gave it, if it was aged.
        crossed: Whether a probe saw it change.
        probed_before: Whether a probe just before its edge proved it unchanged.
        probed_after: Whether a probe saw it change no later than just after its edge.
        miss: How far, in seconds, its probes landed outside their windows.
        index: The position of its spec in the attempt (set by the engine).
    """

    key: str
    spec: Spec
    mark: Mark
    delivery: Delivery | None = None
    queue: Queue | None = None
    count: int = 0
    role: Role = "both"
    age: float | None = None
    crossed: bool = False
    probed_before: bool = False
    probed_after: bool = False
    miss: float = 0.0
    index: int = -1

    @property
    def edge(self) -> float:
        """The spec's edge."""
        return self.spec.edge


class Trial(Protocol):
    """One attempt at an edge check: fresh queues, subjects made in them, one kind of probe."""

    @property
    def wording(self) -> Wording:
        """How failure messages describe the subjects."""
        ...

    async def make(self, spec: Spec) -> Subject:
        """Make the subject `spec` describes and return it with its mark."""
        ...

    async def probe(self, pending: Sequence[Subject]) -> set[str]:
        """Look at the queue once; return the keys of the `pending` subjects that changed.

        Whatever a changed subject hands over (a delivery) is the trial's to check and
        clean up; the engine judges only whether the change came at the right time.
        """
        ...


class Edges:
    """Edge arithmetic for one scenario: where probes go and what they prove.

    Args:
        s: The scenario; its time mode and precision decide everything.
    """

    def __init__(self, s: Scenario) -> None:
        self.s = s
        self._head_started = False

    @property
    def precision(self) -> float:
        """``p``: the backend's `Capabilities.lease_precision_seconds`."""
        return self.s.precision

    @property
    def exact(self) -> bool:
        """Whether time is a fake clock, so probes land exactly where they are aimed."""
        return self.s.time_mode == "clock"

    @property
    def slack(self) -> float:
        """``d``: how far inside an edge a real-time probe aims, in real seconds."""
        return max(SLACK_SECONDS * time_scale(), SLACK_FRACTION * self.s.lease)

    def inside(self, edge: float) -> float:
        """How far beyond ``edge -/+ p`` the probes of `edge` sit."""
        if self.exact:
            return CLOCK_EPSILON * (edge if edge > 0 else self.s.lease)
        return self.slack

    def before(self, edge: float) -> float | None:
        """The elapsed time to probe `edge` from before, or None when that is not above 0."""
        at = edge - self.precision - self.inside(edge)
        return at if at > 0 else None

    def after(self, edge: float) -> float:
        """The elapsed time to probe `edge` from after."""
        return edge + self.precision + self.inside(edge)

    def certainly_before(self, edge: float, high: float) -> bool:
        """Whether an elapsed time of at most `high` is below ``edge - p``."""
        return high < edge - self.precision

    def certainly_after(self, edge: float, low: float) -> bool:
        """Whether an elapsed time of at least `low` is above ``edge + p``."""
        return low > edge + self.precision

    def before_miss(self, edge: float, low: float, high: float) -> float | None:
        """None when ``[low, high]`` lies in ``[edge - p - 2d, edge - p)``, else by how much not.

        Below the allowance, so an unchanged subject proves nothing wrong happened
        early; close to it, so a subject that changed more than ``p + 2d`` early
        cannot slip through.
        """
        floor = edge - self.precision - 2 * self.inside(edge)
        if self.certainly_before(edge, high) and low >= floor:
            return None
        return max(high - (edge - self.precision), floor - low, 0.0)

    def after_miss(self, edge: float, high: float) -> float | None:
        """None when a change seen by elapsed time `high` came no later than ``edge + p + 2d``."""
        ceiling = edge + self.precision + 2 * self.inside(edge)
        return None if high <= ceiling else high - ceiling

    async def head_start(self) -> None:
        """On a fake clock, move it `CLOCK_HEAD_START` seconds (once per scenario)."""
        if self.exact and not self._head_started:
            self._head_started = True
            await self.s.advance(CLOCK_HEAD_START)

    async def timed(self, call: Awaitable[T]) -> tuple[T, Mark]:
        """Await `call` and return its result with the `Mark` bracketing it."""
        start = self.s.now()
        result = await call
        return result, Mark(start, self.s.now())

    async def started(self, call: Coroutine[Any, Any, T]) -> tuple[asyncio.Task[T], Mark]:
        """Start `call` as a task and return it with the `Mark` of its start.

        The task's first step (up to its first wait) runs inside the mark, so the call
        began within it.
        """
        start = self.s.now()
        task = asyncio.create_task(call)
        await asyncio.sleep(0)
        return task, Mark(start, self.s.now())

    async def finished(self, task: asyncio.Task[Any]) -> bool:
        """Wait up to the grace period of real time for `task`; whether it finished."""
        await asyncio.wait({task}, timeout=self.s.grace)
        return task.done()

    async def wait_until(self, instant: float) -> None:
        """Let time pass until the suite's clock reads `instant` (at once if it already does).

        On a fake clock the clock is moved exactly there; on real time the harness
        lets time pass (sleeps) until then.
        """
        s = self.s
        if self.exact:
            gap = instant - s.now()
            if gap > 0:
                await s.advance(gap)
            return
        while (gap := instant - s.now()) > 0:
            await s.advance(gap)

    def too_slow(self, what: str, overrun: float) -> str:
        """The failure message for probes that real time kept making inconclusive."""
        return (
            f"this machine is too slow or too loaded for these timings: raise "
            f"{TIME_SCALE_ENV} (now {time_scale():g}). In {ATTEMPTS} fresh tries, probes of "
            f"{what} just before the edge landed up to {overrun * 1000:.0f} ms past the "
            f"{self.slack * 1000:.0f} ms slack they aim with"
        )


async def conclusively(
    edges: Edges, what: str, attempt: Callable[[], Awaitable[float | None]]
) -> None:
    """Run `attempt` until it was conclusive; fail as too slow after `ATTEMPTS` tries.

    `attempt` returns None when its probes proved what they had to (or it raised an
    AssertionError for a conclusive failure), or the seconds by which its "before"
    probe missed when real time made it inconclusive.
    """
    worst = 0.0
    for _ in range(ATTEMPTS):
        missed = await attempt()
        if missed is None:
            edges.s.boundary(2)  # one probe from before the edge, one from after
            return
        worst = max(worst, missed)
    raise AssertionError(edges.too_slow(what, worst))


async def check_edges(
    s: Scenario,
    edges: Edges,
    open_trial: Callable[[], Awaitable[Trial]],
    specs: Sequence[Spec],
    *,
    ageable: bool = False,
) -> None:
    """Check every spec's edge from before and from after, retrying inconclusive ones.

    Args:
        s: The scenario.
        edges: Its edge arithmetic.
        open_trial: Opens a fresh trial (fresh queues) for each attempt.
        specs: The subjects to make. Makers that let time pass come first, so no
            subject made earlier misses its "before" probe while a later one is made.
        ageable: Whether the subjects are leases the ``age_lease`` hook can age; then,
            with the hook, no real time needs to pass.

    Raises:
        AssertionError: A subject changed before its edge or had not changed after it,
            or real time kept the "before" probes inconclusive.
    """
    mode: EngineMode = (
        "clock"
        if s.time_mode == "clock"
        else "age"
        if ageable and isinstance(s.harness, AgesLeases)
        else "real"
    )
    for spec in specs:
        if spec.before and edges.before(spec.edge) is None:
            raise AssertionError(
                f"cannot probe {spec.label} from before: lease_precision_seconds "
                f"{edges.precision:g} leaves no room below an edge of {spec.edge:g}s; "
                "give the harness a longer lease_seconds"
            )
    await edges.head_start()
    cases = sum(2 if spec.before else 1 for spec in specs)
    remaining = list(specs)
    worst = 0.0
    for _ in range(ATTEMPTS):
        trial = await open_trial()
        run = _Run(s, edges, trial, mode)
        subjects = await run.run(remaining)
        missed = [
            i
            for i, spec in enumerate(remaining)
            if (spec.before and not any(x.probed_before for x in subjects if x.index == i))
            or not any(x.probed_after for x in subjects if x.index == i)
        ]
        if not missed:
            s.boundary(cases)
            return
        if mode == "clock":
            raise AssertionError(
                f"internal: {remaining[missed[0]].label} was not probed right at its edge on a "
                "fake clock; a spec that lets time pass must come first"
            )
        worst = max(worst, *(x.miss for x in subjects if x.index in missed))
        remaining = [remaining[i] for i in missed]
    raise AssertionError(edges.too_slow(", ".join(spec.label for spec in remaining), worst))


class _Run:
    """One attempt: make the subjects, walk their edges, judge every probe."""

    def __init__(self, s: Scenario, edges: Edges, trial: Trial, mode: EngineMode) -> None:
        self.s = s
        self.edges = edges
        self.trial = trial
        self.mode = mode
        self.subjects: list[Subject] = []

    async def run(self, specs: Sequence[Spec]) -> list[Subject]:
        if self.mode == "age":
            await self._run_aged(specs)
        else:
            await self._run_timed(specs)
        return self.subjects

    async def _make(self, index: int, spec: Spec, role: Role) -> Subject:
        subject = await self.trial.make(spec)
        subject.index, subject.role = index, role
        self.subjects.append(subject)
        return subject

    async def _run_aged(self, specs: Sequence[Spec]) -> None:
        # The hook may set the idle time or add to it, so a subject aged twice has a
        # loose upper bound: each spec gets one subject per side, each aged once.
        edges = self.edges
        for index, spec in enumerate(specs):
            at = edges.before(spec.edge)
            if spec.before and at is not None:
                # Aged and probed right after it was made, while its bounds are tight.
                subject = await self._make(index, spec, "before")
                await self._age(subject, at)
                await self._probe(own=subject)
        # Shortest edge first: each probe sees the shorter ones lapse while the "before"
        # subjects of longer edges are still live.
        for edge in sorted({spec.edge for spec in specs}):
            group = [
                await self._make(index, spec, "after")
                for index, spec in enumerate(specs)
                if spec.edge == edge
            ]
            for subject in group:
                await self._age(subject, edges.after(edge))
            await self._probe(own=None)

    async def _run_timed(self, specs: Sequence[Spec]) -> None:
        edges = self.edges
        for index, spec in enumerate(specs):
            await self._make(index, spec, "both")
        # (instant, 0 = before / 1 = after, subject): "before" probes aim the upper bound
        # of the elapsed time, "after" probes its lower bound.
        steps: list[tuple[float, int, Subject]] = []
        for subject in self.subjects:
            at = edges.before(subject.edge)
            if subject.spec.before and at is not None:
                steps.append((subject.mark.start + at, 0, subject))
            steps.append((subject.mark.end + edges.after(subject.edge), 1, subject))
        steps.sort(key=lambda step: (step[0], step[1]))
        for instant, kind, subject in steps:
            if subject.crossed:
                continue
            await edges.wait_until(instant)
            await self._probe(own=subject if kind == 0 else None)

    async def _age(self, subject: Subject, seconds: float) -> None:
        harness = self.s.harness
        assert isinstance(harness, AgesLeases)
        assert subject.delivery is not None, "internal: an ageable subject needs its delivery"
        assert subject.queue is not None, "internal: an ageable subject needs its queue"
        await harness.age_lease(subject.queue, subject.delivery, seconds)
        subject.age = seconds

    def _bounds(self, subject: Subject, start: float, end: float) -> tuple[float, float]:
        if subject.age is not None:
            # Set or added by the hook, once: at least the age, at most the age plus all
            # the time since the mark.
            return subject.age, subject.age + end - subject.mark.start
        return start - subject.mark.end, end - subject.mark.start

    async def _probe(self, *, own: Subject | None) -> None:
        pending = [x for x in self.subjects if not x.crossed]
        if not pending:
            return
        s, edges, wording = self.s, self.edges, self.trial.wording
        start = s.now()
        changed = await self.trial.probe(pending)
        end = s.now()
        p = edges.precision
        for subject in pending:
            low, high = self._bounds(subject, start, end)
            hit = subject.key in changed
            if hit and edges.certainly_before(subject.edge, high):
                raise AssertionError(
                    f"{subject.spec.label} {wording.crossed} at {wording.elapsed} "
                    f"{_span(low, high)}, before its edge of {subject.edge:g}s minus the "
                    f"precision {p:g}s"
                )
            if not hit and edges.certainly_after(subject.edge, low):
                raise AssertionError(
                    f"{subject.spec.label} {wording.not_crossed} at {wording.elapsed} "
                    f"{_span(low, high)}, past its edge of {subject.edge:g}s plus the "
                    f"precision {p:g}s"
                )
            if subject is own:
                miss = edges.before_miss(subject.edge, low, high)
                if miss is None:
                    subject.probed_before = True
                else:
                    subject.miss = max(subject.miss, miss)
            if hit:
                subject.crossed = True
                if subject.role != "before":
                    late = edges.after_miss(subject.edge, high)
                    if late is None:
                        subject.probed_after = True
                    else:
                        subject.miss = max(subject.miss, late)


def _span(low: float, high: float) -> str:
    if math.isclose(low, high, rel_tol=0, abs_tol=1e-9):
        return f"{low:.6g}s"
    return f"between {max(low, 0.0):.4f}s and {high:.4f}s"


async def settle_task(task: asyncio.Task[Any], patience: float) -> None:
    """Cancel `task` if it still runs and wait up to `patience` seconds for it; drop its outcome.

    Used when a probe is over (or failed) with a receive still pending.
    """
    if not task.done():
        task.cancel()
    await asyncio.wait({task}, timeout=patience)
    if task.done() and not task.cancelled():
        # Retrieve the exception, if any, so asyncio does not log it as never retrieved.
        task.exception()
