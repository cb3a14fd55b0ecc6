"""Leader election over a backend's `Leadership` part: one leader at a time, fenced.

Example::

    leadership = taskrunner.queue.leadership_of(queue)
    elector = LeaderElector(leadership, "reports", holder="host-1:4242", ttl_seconds=15)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(elector.run())
        token = await elector.wait_elected()
        ...  # act as leader; pass `token` to fenced calls (Leadership.fire)
        await elector.wait_deposed()

Guarantees:

* `is_leader` is True only while the lease is surely live on the backend: the local
  deadline is measured from *before* the acquire or renew call was sent, shortened by
  the backend's precision, so the process stops acting as leader before the backend
  could let another holder take over (given clocks that run at the same rate).
* A renew that fails (the backend says the token is stale) deposes at once; a renew
  that errors (backend unreachable) is retried with backoff until the local deadline,
  and deposes then.
* The lease is renewed every ``ttl_seconds / 3``; a follower tries to acquire as often.
* `stop` ends `run` and resigns, so another holder takes over without waiting out the
  lease. Cancelling `run` does not resign (the lease then lapses after its ttl).

Time goes through the injected clock; cancellation is never swallowed.
"""

from __future__ import annotations

import asyncio
import logging
import math

from taskrunner.clock import Clock, SystemClock, wait_event, wait_future
from taskrunner.errors import BackendError, ConfigurationError
from taskrunner.queue import LeaderLease, Leadership

__all__ = ["LeaderElector"]

_log = logging.getLogger("taskrunner.leader")

# Longest wait between two attempts after backend errors, as a multiple of the ttl.
_MAX_BACKOFF_TTLS = 1.0


class LeaderElector:
    """Campaigns for election `name` as `holder` and keeps the lease while it can.

    Args:
        leadership: The backend's `Leadership` part (`taskrunner.queue.leadership_of`).
        name: The election's name; every campaigner for one role uses the same one.
        holder: This campaigner's name, unique among them (e.g. host, pid and a
            random suffix); a restarted process should use a new one.
        ttl_seconds: Lease length; a dead leader is replaced within about
            ``ttl_seconds * 4/3``.
        clock: Time source (the local monotonic clock measures the deadline).
        precision_seconds: How early the backend may end a lease (its
            ``Capabilities.lease_precision_seconds``); subtracted from the deadline.
    """

    def __init__(
        self,
        leadership: Leadership,
        name: str,
        holder: str,
        *,
        ttl_seconds: float = 15.0,
        clock: Clock | None = None,
        precision_seconds: float = 0.0,
    ) -> None:
        if not name or not holder:
            raise ConfigurationError("an election needs a non-empty name and holder")
        if not (math.isfinite(ttl_seconds) and ttl_seconds > 0):
            raise ConfigurationError(
                f"ttl_seconds={ttl_seconds} must be > 0 and finite", setting="ttl_seconds"
            )
        if not (math.isfinite(precision_seconds) and 0 <= precision_seconds < ttl_seconds / 3):
            raise ConfigurationError(
                f"precision_seconds={precision_seconds} must be >= 0 and below ttl/3",
                setting="precision_seconds",
            )
        self._leadership = leadership
        self.name = name
        self.holder = holder
        self.ttl_seconds = ttl_seconds
        self._clock = clock or SystemClock()
        self._precision = precision_seconds
        self._token: int | None = None
        self._deadline = -math.inf
        self._elected = asyncio.Event()
        self._deposed = asyncio.Event()
        self._deposed.set()
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        """Whether this campaigner leads now (and its lease is surely live)."""
        return self._token is not None and self._clock.monotonic() < self._deadline

    @property
    def token(self) -> int | None:
        """The fencing token of the current term, or None when not leading."""
        return self._token if self.is_leader else None

    async def wait_elected(self) -> int:
        """Wait until this campaigner leads; returns the term's fencing token."""
        while True:
            await self._elected.wait()
            token = self.token
            if token is not None:
                return token
            await self._deposed.wait()

    async def wait_deposed(self) -> None:
        """Wait until this campaigner no longer leads (returns at once if it does not)."""
        await self._deposed.wait()

    def step_down(self, token: int) -> None:
        """Stop leading term `token` now, without asking the backend.

        For a caller that learnt the term is over (a fenced call refused its token);
        `run` campaigns again at once. A stale `token` changes nothing.
        """
        if self._token == token:
            self._lose("a fenced call refused the token")
            self._wake.set()

    def stop(self) -> None:
        """Ask `run` to resign (when leading) and return."""
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        """Campaign and renew until `stop`; resigns before returning."""
        backoff = self._first_backoff
        try:
            while not self._stopping.is_set():
                # Cleared before the call, so a stop or step-down during it is not lost.
                self._wake.clear()
                try:
                    await self._watched_step()
                    backoff = self._first_backoff
                    wait = self._next_wait()
                except BackendError as exc:
                    wait = min(backoff, self._until_deadline())
                    _log.warning(
                        "leader election %r: backend error (%s); retrying in %.2fs",
                        self.name,
                        exc,
                        wait,
                    )
                    backoff = min(backoff * 2, self.ttl_seconds * _MAX_BACKOFF_TTLS)
                self._check_deadline()
                await wait_event(self._clock, self._wake, max(wait, 0.0))
                self._check_deadline()
            await self._resign()
        finally:
            # Whatever ends run (stop, cancel, a bug), nobody may act on this term now.
            if self._token is not None:
                self._lose("the elector stopped")

    @property
    def _interval(self) -> float:
        return self.ttl_seconds / 3

    @property
    def _first_backoff(self) -> float:
        # Short enough that a leader retries a failed renew a few times before its
        # deadline.
        return self.ttl_seconds / 12

    async def _watched_step(self) -> None:
        # A call that hangs past the deadline must not keep this process leading:
        # the deadline is enforced while the call is still on its way.
        step = asyncio.ensure_future(self._step())
        try:
            if self._token is not None:
                await wait_future(self._clock, step, self._until_deadline())
                self._check_deadline()
            await step
        finally:
            step.cancel()

    async def _step(self) -> None:
        sent = self._clock.monotonic()
        if self._token is None:
            lease = await self._leadership.acquire_leadership(
                self.name, self.holder, ttl_seconds=self.ttl_seconds
            )
            if lease is not None:
                self._gain(lease, sent)
            return
        token = self._token
        lease = await self._leadership.renew_leadership(
            self.name, self.holder, token, ttl_seconds=self.ttl_seconds
        )
        if self._token != token:  # stepped down while the renew was on its way
            return
        if lease is None:
            self._lose("the renew was refused (another holder took over)")
        else:
            self._deadline = self._deadline_of(lease, sent)

    def _deadline_of(self, lease: LeaderLease, sent: float) -> float:
        # The backend started the lease after `sent`, so it lasts at least until
        # sent + remaining (minus its precision) on a clock that runs at our rate.
        remaining = min(lease.remaining_seconds, self.ttl_seconds)
        return sent + remaining - self._precision

    def _gain(self, lease: LeaderLease, sent: float) -> None:
        self._token = lease.token
        self._deadline = self._deadline_of(lease, sent)
        if not self.is_leader:  # the call took longer than the lease
            self._token = None
            return
        _log.info("leader election %r: %s leads (token %d)", self.name, self.holder, lease.token)
        self._deposed.clear()
        self._elected.set()

    def _lose(self, why: str) -> None:
        if self._token is None:
            return
        _log.warning(
            "leader election %r: %s no longer leads (token %d): %s",
            self.name,
            self.holder,
            self._token,
            why,
        )
        self._token = None
        self._deadline = -math.inf
        self._elected.clear()
        self._deposed.set()

    def _check_deadline(self) -> None:
        if self._token is not None and self._clock.monotonic() >= self._deadline:
            self._lose("the lease could not be renewed before it might lapse")

    def _until_deadline(self) -> float:
        if self._token is None:
            return math.inf
        return max(0.0, self._deadline - self._clock.monotonic())

    def _next_wait(self) -> float:
        if self._token is None:
            return self._interval
        return min(self._interval, self._until_deadline())

    async def _resign(self) -> None:
        token = self._token
        if token is None:
            return
        self._lose("resigning")
        try:
            await self._leadership.resign_leadership(self.name, self.holder, token)
        except BackendError as exc:
            _log.warning(
                "leader election %r: could not resign (%s); the lease lapses in %.1fs",
                self.name,
                exc,
                self.ttl_seconds,
            )
