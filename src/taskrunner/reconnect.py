"""After the backend was unreachable, leases are heartbeated before any new work is taken.

Internal module. A backend that comes back after an outage may count the whole outage
as idle time of every lease (Redis does after a restart: a lease's age is measured
from its last heartbeat on the server's clock). Each lease this process holds then
survives only if its heartbeat gets through before some reclaimer sees it lapsed. So
after any backend call of the runner fails with `BackendUnavailableError`, the
`ReconnectGate` closes: fetchers and the reclaimer wait at it, the lease keeper is
woken and retries at short intervals, and the gate opens again once a heartbeat of
every lease held succeeded *after* the last failure (with no lease held, as soon as
the keeper looks). Acks are not held back: they are fenced and cannot steal anything.
"""

from __future__ import annotations

import asyncio

__all__ = ["ReconnectGate"]


class ReconnectGate:
    """Holds receives and reclaims back until heartbeats got through after a failure."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._failed = asyncio.Event()
        self._failures = 0

    @property
    def is_open(self) -> bool:
        """Whether receives and reclaims may go ahead."""
        return self._open.is_set()

    @property
    def failed_event(self) -> asyncio.Event:
        """Set while the gate is closed; the lease keeper waits on it to wake early."""
        return self._failed

    @property
    def failures(self) -> int:
        """How many failures were reported so far; read before a heartbeat, pass to `passed`."""
        return self._failures

    def failure(self) -> None:
        """A backend call failed with `BackendUnavailableError`: close the gate."""
        self._failures += 1
        self._open.clear()
        self._failed.set()

    def passed(self, failures_before: int) -> None:
        """Open the gate: a heartbeat of every lease held succeeded.

        Args:
            failures_before: `failures` as read when that heartbeat started; a failure
                reported since then keeps the gate closed.
        """
        if failures_before == self._failures:
            self.force_open()

    def force_open(self) -> None:
        """Open the gate whatever happened (heartbeats are broken by a bug, not an outage)."""
        self._open.set()
        self._failed.clear()

    async def wait_open(self, stopping: asyncio.Event) -> bool:
        """Wait until the gate is open or `stopping` is set; True when open."""
        if self._open.is_set():
            return True
        opened = asyncio.ensure_future(self._open.wait())
        stopped = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait({opened, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
            stopped.cancel()
        return self._open.is_set() and not stopping.is_set()
