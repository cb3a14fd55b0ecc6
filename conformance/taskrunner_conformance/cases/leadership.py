"""The optional Leadership part: leader leases, fencing tokens, fire-once records (X50-X55).

Every bullet of the `taskrunner.queue.Leadership` docstring has a test that reads the
same. The tests need ``capabilities.leadership`` (skipped with the reason otherwise)
and fail when it is claimed while `taskrunner.queue.leadership_of` returns None.

Leader leases are probed at their edges with `taskrunner_conformance.edges`: held
(another holder's acquire returns None, `current_leader` names the holder) below
``ttl - p``, lapsed (another holder takes it) above ``ttl + p``, counted from the last
acquire or renew, whichever made it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence

from taskrunner.queue import FireRecord, LeaderLease, Leadership

from ..edges import Edges, Spec, Subject, Wording, check_edges
from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["LeadershipCases"]

# An instant far from zero (Unix seconds), so "later than the last fired" is not "> 0".
INSTANT = 1_800_000_000.0


def _check_lease(lease: LeaderLease | None, name: str, holder: str, ttl: float) -> LeaderLease:
    assert isinstance(lease, LeaderLease), f"{holder} did not get {name!r}: {lease!r}"
    assert (lease.name, lease.holder) == (name, holder), f"the lease returned is {lease!r}"
    assert type(lease.token) is int, f"the token is {lease.token!r}, not an int"
    assert 0 < lease.remaining_seconds <= ttl + 1e-6, (
        f"a lease of {ttl:g}s just granted has {lease.remaining_seconds!r}s remaining"
    )
    return lease


async def _acquire(part: Leadership, name: str, holder: str, ttl: float) -> LeaderLease:
    """`holder` must get the lease of `name`."""
    return _check_lease(
        await part.acquire_leadership(name, holder, ttl_seconds=ttl), name, holder, ttl
    )


async def _refused(part: Leadership, name: str, holder: str, ttl: float, when: str) -> None:
    got = await part.acquire_leadership(name, holder, ttl_seconds=ttl)
    assert got is None, f"{holder} acquired {name!r} {when}: {got!r}"


async def _leader(part: Leadership, name: str) -> tuple[str, int] | None:
    lease = await part.current_leader(name)
    if lease is None:
        return None
    assert lease.name == name, f"current_leader({name!r}) returned {lease!r}"
    return lease.holder, lease.token


class _LeaderTrial:
    """Elections whose lease was made by ``how``; probed by an intruder's acquire.

    ``how``: ``acquire`` (ttl ``edge``); ``renew`` (acquired for ``edge``, renewed
    ``lead`` later for ``edge``); ``reacquire`` (acquired, acquired again by the same
    holder ``lead`` later: a renew keeping the token); ``lapsed`` (acquired for
    ``lead``, lapsed, renewed for ``edge`` with its token).
    """

    wording = Wording("was taken over", "was still not free", "time since its acquire or renew")

    def __init__(self, s: Scenario, edges: Edges, holder: Leadership, prober: Leadership) -> None:
        self.s = s
        self.edges = edges
        self.holder = holder
        self.prober = prober
        self.tokens: dict[str, int] = {}

    async def make(self, spec: Spec) -> Subject:
        edges = self.edges
        name = f"election-{len(self.tokens)}"
        first_ttl = spec.lead if spec.how == "lapsed" else spec.edge
        lease, mark = await edges.timed(
            self.holder.acquire_leadership(name, "holder", ttl_seconds=first_ttl)
        )
        token = _check_lease(lease, name, "holder", first_ttl).token
        if spec.how != "acquire":
            wait = edges.after(spec.lead) if spec.how == "lapsed" else spec.lead
            await edges.wait_until(mark.end + wait)
            if spec.how == "reacquire":
                call: Awaitable[LeaderLease | None] = self.holder.acquire_leadership(
                    name, "holder", ttl_seconds=spec.edge
                )
            else:
                call = self.holder.renew_leadership(name, "holder", token, ttl_seconds=spec.edge)
            lease, mark = await edges.timed(call)
            again = _check_lease(lease, name, "holder", spec.edge)
            assert again.token == token, (
                f"{spec.label}: the {spec.how} changed the token from {token} to {again.token}"
            )
        self.tokens[name] = token
        return Subject(name, spec, mark)

    async def probe(self, pending: Sequence[Subject]) -> set[str]:
        taken = set()
        for subject in pending:
            name = subject.key
            seen = await _leader(self.prober, name)
            got = await self.prober.acquire_leadership(name, "intruder", ttl_seconds=1e6)
            if got is None:
                assert seen == ("holder", self.tokens[name]), (
                    f"{subject.spec.label}: the intruder was refused, but current_leader "
                    f"says {seen}, not the holder with token {self.tokens[name]}"
                )
                continue
            assert got.token > self.tokens[name], (
                f"{subject.spec.label}: the takeover got token {got.token}, not above "
                f"{self.tokens[name]}"
            )
            taken.add(name)
        return taken


def _bind(
    method: Callable[..., Awaitable[object]], *args: object
) -> Callable[[], Awaitable[object]]:
    """``method(*args[:-1], ttl_seconds=args[-1])``, called later."""

    def call() -> Awaitable[object]:
        return method(*args[:-1], ttl_seconds=args[-1])

    return call


class LeadershipCases(ConformanceBase):
    """X50-X55."""

    @conformance("X50")
    async def test_at_most_one_holder_has_a_live_lease_of_an_election_at_any_time(
        self, s: Scenario
    ) -> None:
        """Another holder is refused while the lease lives; ten racing holders: exactly one wins.

        Elections are independent of each other.
        """
        part = s.require_leadership()
        other = s.require_leadership(await s.open())
        ttl = s.lease
        lease = await _acquire(part, "e", "a", ttl)
        await _refused(other, "e", "b", ttl, "while a's lease lives")
        assert await _leader(other, "e") == ("a", lease.token)
        await s.advance(s.live_age)
        await _refused(other, "e", "b", ttl, f"{s.live_age:g}s into a's {ttl:g}s lease")
        assert await _leader(other, "e") == ("a", lease.token)
        await _acquire(other, "f", "b", ttl)
        assert await _leader(part, "e") == ("a", lease.token), "another election moved e"

        handles = [s.require_leadership(await s.open()) for _ in range(5)]
        for round_, when in enumerate(("on a fresh election", "after the lease lapsed")):
            results = await asyncio.gather(
                *(
                    handles[i % 5].acquire_leadership("race", f"racer-{i}", ttl_seconds=ttl)
                    for i in range(10)
                )
            )
            winners = [r for r in results if r is not None]
            assert len(winners) == 1, f"{len(winners)} of 10 racing holders won {when}"
            assert await _leader(part, "race") == (winners[0].holder, winners[0].token)
            if round_ == 0:
                first = winners[0].token
                await s.advance(ttl + s.margin)
            else:
                assert winners[0].token > first, "the retake did not issue a larger token"

    @conformance("X51")
    async def test_lease_lasts_its_ttl_seconds_from_its_last_acquire_or_renew_and_then_lapses(
        self, s: Scenario
    ) -> None:
        """Leases by acquire, renew, a live re-acquire and a renew after a lapse, at their edges."""
        s.require_leadership()
        edges = Edges(s)
        lease = s.lease
        # Makers that let time pass first; their waits together stay inside every edge.
        specs = [
            Spec(
                lease, f"a lease of {lease:g}s renewed after {0.2 * lease:g}s", "renew", 0.2 * lease
            ),
            Spec(
                0.8 * lease,
                f"a lease of {0.8 * lease:g}s re-acquired after {0.2 * lease:g}s",
                "reacquire",
                0.2 * lease,
            ),
            Spec(
                0.6 * lease,
                f"a lease of {0.6 * lease:g}s renewed after a {0.1 * lease:g}s lease lapsed",
                "lapsed",
                0.1 * lease,
            ),
            Spec(lease, f"a lease of {lease:g}s by acquire", "acquire"),
            Spec(0.37 * lease, f"a lease of {0.37 * lease:g}s by acquire", "acquire"),
        ]

        async def open_trial() -> _LeaderTrial:
            namespace = s.other_namespace()
            holder = s.require_leadership(await s.open(namespace))
            prober = s.require_leadership(await s.open(namespace))
            return _LeaderTrial(s, edges, holder, prober)

        await check_edges(s, edges, open_trial, specs)

    @conformance("X51")
    async def test_current_leader_is_none_once_the_lease_lapsed(self, s: Scenario) -> None:
        """current_leader names the live lease with its remaining time, and None after it."""
        part = s.require_leadership()
        ttl = s.lease
        lease = await _acquire(part, "e", "a", ttl)
        await s.advance(ttl / 2)
        live = await part.current_leader("e")
        assert live is not None, "current_leader lost a live lease"
        assert (live.holder, live.token) == ("a", lease.token)
        assert live.remaining_seconds <= ttl / 2 + s.precision + 1e-6, (
            f"half-way through a {ttl:g}s lease {live.remaining_seconds:g}s remain"
        )
        await s.advance(ttl / 2 + s.margin)
        assert await part.current_leader("e") is None, "current_leader named a lapsed lease"
        assert await part.current_leader("never-held") is None

    @conformance("X52")
    async def test_each_change_of_holder_or_retake_after_a_lapse_issues_a_larger_fencing_token(
        self, s: Scenario
    ) -> None:
        """Renew and a live re-acquire keep the token; resign, takeover, retake all raise it."""
        part = s.require_leadership()
        other = s.require_leadership(await s.open())
        ttl = s.lease
        tokens = [(await _acquire(part, "e", "a", ttl)).token]
        renewed = await part.renew_leadership("e", "a", tokens[0], ttl_seconds=ttl)
        assert renewed is not None, "the holder could not renew its live lease"
        assert renewed.token == tokens[0], f"renew gave {renewed!r}"
        assert (await _acquire(part, "e", "a", ttl)).token == tokens[0], (
            "a re-acquire of a live lease by its holder changed the token"
        )
        steps: list[tuple[str, Callable[[], Awaitable[LeaderLease]]]] = [
            ("another holder after a resign", lambda: _acquire(other, "e", "b", ttl)),
            ("the same holder after its lease lapsed", lambda: _acquire(other, "e", "b", ttl)),
            ("another holder after a lapse", lambda: _acquire(part, "e", "a", ttl)),
            ("another holder through another handle", lambda: _acquire(other, "e", "c", ttl)),
        ]
        for index, (what, step) in enumerate(steps):
            if index == 0:
                assert await part.resign_leadership("e", "a", tokens[-1]) is True, "resign"
            else:
                await s.advance(ttl + s.margin)
            token = (await step()).token
            assert token > max(tokens), f"{what} got token {token}, not above {max(tokens)}"
            tokens.append(token)

    @conformance("X53")
    async def test_renew_and_resign_with_a_stale_token_change_nothing(self, s: Scenario) -> None:
        """A deposed holder, a wrong token, another holder's name: refused, the lease untouched."""
        part = s.require_leadership()
        other = s.require_leadership(await s.open())
        ttl = s.lease
        old = await _acquire(part, "e", "a", ttl)
        await s.advance(ttl + s.margin)
        current = await _acquire(other, "e", "b", ttl)
        before = await other.current_leader("e")
        # Arguments, not coroutines: a coroutine left unawaited when an assertion fails
        # is reported by the garbage collector later, against whatever test runs then.
        attempts = {
            "the deposed holder's renew": ("a", old.token),
            "a renew by the holder with the old token": ("b", old.token),
            "a renew with the current token and another holder's name": ("a", current.token),
            "a renew with a token never issued": ("b", current.token + 1000),
        }
        for what, (holder, token) in attempts.items():
            got = await part.renew_leadership("e", holder, token, ttl_seconds=ttl)
            assert got is None, f"{what} was accepted: {got!r}"
        resigns = {
            "the deposed holder's resign": ("a", old.token),
            "a resign by the holder with the old token": ("b", old.token),
            "a resign with the current token and another holder's name": ("a", current.token),
        }
        for what, (holder, token) in resigns.items():
            assert await part.resign_leadership("e", holder, token) is False, f"{what} resigned"
        s.boundary(len(attempts) + len(resigns))
        after = await other.current_leader("e")
        assert after is not None, "refused renews and resigns ended the lease"
        assert (after.holder, after.token) == ("b", current.token), (
            f"after refused renews and resigns the lease is {after!r}"
        )
        if s.time_mode == "clock":
            assert before is not None
            assert after.remaining_seconds == before.remaining_seconds, (
                "a refused renew extended it"
            )
        # Not extended: it lapses at its own ttl.
        await s.advance(ttl + s.margin)
        assert await other.current_leader("e") is None, "a stale renew extended the lease"
        assert await part.renew_leadership("e", "a", old.token, ttl_seconds=ttl) is None
        renewed = await other.renew_leadership("e", "b", current.token, ttl_seconds=ttl)
        assert renewed is not None, "the holder could not renew its lapsed, untaken lease"
        assert renewed.token == current.token, (
            "the current holder could not renew its lapsed, untaken lease"
        )
        assert await other.resign_leadership("e", "b", current.token) is True
        assert await other.current_leader("e") is None, "a resigned lease is still current"
        assert await other.resign_leadership("e", "b", current.token) is False, "resigned twice"

    @conformance("X53")
    async def test_resigned_holder_can_no_longer_renew_or_resign(self, s: Scenario) -> None:
        """Resigned while live, and resigned after a lapse nobody took (which ends it too).

        For both the holder's renew with its token returns None, at once and a ttl
        later, a second resign returns False, nobody is current, and another holder
        then takes the election with a larger token.
        """
        part = s.require_leadership()
        other = s.require_leadership(await s.open())
        ttl = s.lease
        when = {"lapsed": "after a lapse", "live": "while its lease lived"}
        leases = {"lapsed": await _acquire(part, "lapsed", "a", ttl)}
        await s.advance(ttl + s.margin)
        leases["live"] = await _acquire(part, "live", "a", ttl)
        for name, lease in leases.items():
            resigned = await part.resign_leadership(name, "a", lease.token)
            assert resigned is True, f"the holder's resign {when[name]} returned False"
        for later in ("", " a ttl later"):
            for name, lease in leases.items():
                renewed = await part.renew_leadership(name, "a", lease.token, ttl_seconds=ttl)
                assert renewed is None, (
                    f"the holder renewed {renewed!r}{later} after resigning {when[name]}"
                )
                assert await _leader(other, name) is None, (
                    f"a lease resigned {when[name]} is current{later}"
                )
            if not later:
                await s.advance(ttl + s.margin)
        for name, lease in leases.items():
            again = await part.resign_leadership(name, "a", lease.token)
            assert again is False, f"a lease resigned {when[name]} was resigned again"
            taken = await _acquire(other, name, "b", ttl)
            assert taken.token > lease.token, (
                f"the election resigned {when[name]} was taken with token {taken.token}, not "
                f"above {lease.token}"
            )
        s.boundary(2)

    @conformance("X54")
    async def test_fire_with_the_latest_token_is_accepted_after_a_resign_until_somebody_takes_it(
        self, s: Scenario
    ) -> None:
        """The resigned leader's token still fires (nobody took it), and stops once somebody does.

        The instant fired after the resign is recorded; the new holder's token fires the
        next instant, the old one no longer does.
        """
        part = s.require_leadership()
        other = s.require_leadership(await s.open())
        ttl = s.lease
        token = (await _acquire(part, "e", "a", ttl)).token
        assert await part.resign_leadership("e", "a", token) is True, "resign"

        async def fire(instant: float, with_token: int, by: Leadership = part) -> str | None:
            return await by.fire(
                election="e", token=with_token, schedule="s", instant=instant, body=b"resigned"
            )

        fired = await fire(INSTANT, token)
        assert isinstance(fired, str), (
            f"fire with the latest token after a resign, nobody having taken the lease since, "
            f"returned {fired!r}"
        )
        records = await other.fire_records(["s"])
        assert records == {"s": FireRecord(schedule="s", instant=INSTANT, message_id=fired)}, (
            f"fire_records after a fire following a resign: {records}"
        )
        taken = (await _acquire(other, "e", "b", ttl)).token
        assert await fire(INSTANT + 60, token) is None, "the resigned token fired after a takeover"
        later = await fire(INSTANT + 60, taken, by=other)
        assert isinstance(later, str), "the new holder's token did not fire the next instant"
        assert await s.queue.len() == 2, "fires after a resign added the wrong number of messages"
        s.boundary(2)

    @conformance("X54")
    async def test_schedule_s_instant_is_fired_at_most_once_and_only_under_the_current_token(
        self, s: Scenario
    ) -> None:
        """Same, earlier instants refused; a lapsed token nobody took fires, a deposed one not."""
        part = s.require_leadership()
        other = s.require_leadership(await s.open())
        ttl = s.lease
        token = (await _acquire(part, "e", "a", ttl)).token

        async def fire(
            instant: float,
            *,
            by: Leadership = part,
            with_token: int | None = None,
            schedule: str = "s",
        ) -> str | None:
            return await by.fire(
                election="e",
                token=token if with_token is None else with_token,
                schedule=schedule,
                instant=instant,
                body=f"{schedule} at {instant:.0f}".encode(),
            )

        first = await fire(INSTANT)
        assert isinstance(first, str), f"the first fire under the current token returned {first!r}"
        # Calls, not coroutines: see X53's renews.
        refused: dict[str, Callable[[], Awaitable[str | None]]] = {
            "the same instant again": lambda: fire(INSTANT),
            "the same instant through another handle": lambda: fire(INSTANT, by=other),
            "an earlier instant": lambda: fire(INSTANT - 60),
            "a token never issued": lambda: fire(INSTANT + 60, with_token=token + 1000),
            "a smaller token": lambda: fire(INSTANT + 60, with_token=token - 1),
        }
        for what, call in refused.items():
            got = await call()
            assert got is None, f"fire of {what} added message {got}"
        s.boundary(len(refused))
        assert await s.queue.len() == 1, "a refused fire added a message"
        records = await other.fire_records(["s", "unknown"])
        assert records == {"s": FireRecord(schedule="s", instant=INSTANT, message_id=first)}, (
            f"fire_records: {records}"
        )
        second = await fire(INSTANT + 60)
        assert isinstance(second, str), "a later instant did not fire"
        assert second != first, "two firings added one message id"
        elsewhere = await fire(INSTANT, schedule="s2")
        assert isinstance(elsewhere, str), "schedules are independent"

        await s.advance(ttl + s.margin)
        lapsed = await fire(INSTANT + 120)
        assert isinstance(lapsed, str), "a lapsed token nobody took since could not fire"
        deposer = await _acquire(other, "e", "b", ttl)
        assert await fire(INSTANT + 180) is None, "the deposed leader's token fired"
        assert (await part.fire_records(["s"]))["s"].instant == INSTANT + 120
        racing = await asyncio.gather(
            *(
                fire(INSTANT + 180, by=(part, other)[i % 2], with_token=deposer.token)
                for i in range(10)
            )
        )
        fired = [r for r in racing if r is not None]
        assert len(fired) == 1, f"ten concurrent fires of one instant added {len(fired)} messages"
        assert (await other.fire_records(["s", "s2"])) == {
            "s": FireRecord(schedule="s", instant=INSTANT + 180, message_id=fired[0]),
            "s2": FireRecord(schedule="s2", instant=INSTANT, message_id=elsewhere),
        }
        assert await other.fire_records([]) == {}
        ids = [first, second, elsewhere, lapsed, fired[0]]
        assert len(set(ids)) == 5, f"fires reused ids: {ids}"

    @conformance("X54")
    async def test_fire_adds_a_normal_ready_message(self, s: Scenario) -> None:
        """Counted ready and by len, delivered once with count 1, acked; ids unlike add's."""
        part = s.require_leadership()
        token = (await _acquire(part, "e", "a", s.lease)).token
        (plain,) = await s.add([b"plain"])
        fired = await part.fire(
            election="e", token=token, schedule="s", instant=INSTANT, body=b"\x00fired"
        )
        assert isinstance(fired, str), f"fire returned {fired!r}"
        assert fired != plain, "fire reused an id of add"
        stats = await s.queue.stats()
        assert (stats.ready, stats.delayed, stats.in_flight) == (2, 0, 0)
        assert await s.queue.len() == 2
        got = {d.message_id: d for d in await s.receive_n(s.queue, s.consumer("a"), 2)}
        assert set(got) == {plain, fired}
        assert (got[fired].body, got[fired].delivery_count) == (b"\x00fired", 1)
        assert await s.queue.ack(list(got.values())) == []
        await s.nothing_for(s.queue, s.consumer("b"), {fired})

    @conformance("X55")
    async def test_invalid_leadership_arguments_raise_and_change_nothing(self, s: Scenario) -> None:
        """Zero, negative, NaN, infinite TTLs; empty names; non-bytes bodies; unfinite instants."""
        part = s.require_leadership()
        nan, inf = math.nan, math.inf
        good = await _acquire(part, "held", "a", s.lease)
        calls: dict[str, tuple[type[Exception], Callable[[], Awaitable[object]]]] = {}
        for ttl in (0.0, -1.0, nan, inf):
            calls[f"acquire ttl={ttl}"] = (
                ValueError,
                _bind(part.acquire_leadership, "e", "a", ttl),
            )
            calls[f"renew ttl={ttl}"] = (
                ValueError,
                _bind(part.renew_leadership, "held", "a", good.token, ttl),
            )
        calls["acquire name=''"] = (
            ValueError,
            lambda: part.acquire_leadership("", "a", ttl_seconds=1.0),
        )
        calls["acquire holder=''"] = (
            ValueError,
            lambda: part.acquire_leadership("e", "", ttl_seconds=1.0),
        )

        def fire(**changes: object) -> Callable[[], Awaitable[object]]:
            arguments: dict[str, object] = {
                "election": "held",
                "token": good.token,
                "schedule": "s",
                "instant": INSTANT,
                "body": b"x",
            }
            arguments.update(changes)
            return lambda: part.fire(**arguments)  # type: ignore[arg-type]

        calls["fire body='x'"] = (TypeError, fire(body="x"))
        calls["fire instant=nan"] = (ValueError, fire(instant=nan))
        calls["fire instant=inf"] = (ValueError, fire(instant=inf))
        calls["fire schedule=''"] = (ValueError, fire(schedule=""))
        calls["fire election=''"] = (ValueError, fire(election=""))
        wrong = []
        for label, (expected, call) in calls.items():
            try:
                result = await call()
            except expected:
                continue
            except Exception as exc:
                wrong.append(f"{label} raised {exc!r}, not {expected.__name__}")
            else:
                wrong.append(f"{label} returned {result!r}")
        assert not wrong, "; ".join(wrong)
        s.boundary(len(calls))
        assert await part.current_leader("e") is None, "a refused acquire took the lease"
        held = await part.current_leader("held")
        assert held is not None, "a refused call ended a live lease"
        assert held.token == good.token
        if s.time_mode == "clock":
            assert held.remaining_seconds == good.remaining_seconds, "a refused renew renewed"
        assert await part.fire_records(["s"]) == {}, "a refused fire recorded a firing"
        assert await s.queue.len() == 0, "a refused fire added a message"
