"""The in-memory backend: the full `Queue` contract inside one process.

Use it for unit tests and as the embedded default (``memory://``). Differences from a
server-backed queue, stated up front:

* State lives in a process-local store. Handles opened on the same store (with
  `InMemoryQueue.open_handle`, or with the same ``memory://NAME`` URL in one process)
  see the same messages; other processes see nothing, and nothing survives the process.
* Leases are measured on the injected `Clock`, so a test advances a
  `taskrunner.testing.FakeClock` past a lease instead of sleeping.
* With ``requires_heartbeat=False`` leases never lapse: `reclaim` returns nothing and
  in-flight messages come back only through `release`.
* All handles must be used from one event loop; the store is not thread-safe.
* Delayed adds, unique keys, cancellation and leadership (`scheduling`, `leadership`)
  are exact on the injected clock: precision 0, so a delayed message is ready at its
  due time and a unique key or a leader lease lapses at its deadline, to the tick.
  ``due_at`` is read against the clock's wall time once, at the add, and then waits
  on its monotonic time like a release delay. `cancel` leaves the entry in place and
  skips it when reached (constant time per id); counts subtract the skipped entries.
* Results (`results`) are exact on the injected clock too: a result is returned while
  the clock reads before its expiry and never from its expiry on. Handles of one store
  share them, as they share messages. Expired results are dropped when read and swept
  from a heap of expiries on every `ResultStore` call, at most ``256`` plus the number
  of writes in the call each time, so no call pauses on a backlog, a backlog drains
  (each call removes more than it adds), and the heap is rebuilt once it holds more
  than twice the results plus 1024 entries (stale entries of overwritten results).
  `wait_result` waits on a future that `put_results` completes: no polling.
* `browse` lists waiting messages in id order (the add order; a released message keeps
  its place) by walking the store's records from the first, so a page costs a walk
  up to its cursor (in process: about 50 ns per message passed over); in-flight ones
  in id order from the leased set, a page costing the number in flight.
* `lookup` answers from the message records and an index of dead letters by original
  id, in constant time per id. Times are read off the monotonic clock and reported on
  the wall clock as the clock reads it now (``added_at`` and ``due_at`` move with any
  step of the wall clock since the add).

Below the contract methods, under "Test conveniences", sit synchronous inspection
helpers (`ready_bodies`, `in_flight`, `dead_letters`, `held_results`). The runner
never calls them.
"""

from __future__ import annotations

# Not API: the deliberately broken backends of tests/conformance build on the two
# private names.
from .browse import _browsed as _browsed
from .queue import InMemoryQueue
from .store import _Message as _Message
from .url import open_from_url, open_private

__all__ = ["InMemoryQueue", "open_from_url", "open_private"]
