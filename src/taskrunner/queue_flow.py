"""Flow control in the backend contract: the `Flow` an `AddRequest` carries.

A message added with a `Flow` is *waiting* until the backend *admits* it inside a
`Queue.receive`; only then is it leased. Admission is where concurrency limits, rate
limits and fairness across keys hold, on the backend's clock, across every worker and
process sharing the queue. A backend that honours it claims
``Capabilities.flow_control``; a request with a flow on one that does not is refused
with ValueError before anything is added (as for every unclaimed option).

Guarantees, one per line; each has a conformance test that reads the same:

* A waiting message counts as ready in `stats` and `len`, and is leased only once admitted.
* Admission is round-robin: the admissible key served least recently goes first.
* Messages of one key are admitted in the order they were added.
* At most ``concurrency`` messages of a key are admitted and not yet at a final outcome.
* An admitted message keeps its slot through lease lapse and reclaim; reclaim admits none.
* Ack, dead-letter, release, cancel and purge of an admitted message free its slot.
* A released message waits again, behind its key's waiting messages, once its delay is over.
* Admissions of one rate key follow GCRA: ``burst`` at once, then one per ``1 / rate`` s.
* A message that is not admitted spends no delivery: its first lease has delivery count 1.
* A retried dead letter waits again under the flow its message had.
* A waiting message looked up names its slot holders or its rate's next time.

"Served least recently": a key's turn is the time of its last admission, or, if it
never had one, the add of its oldest waiting message; the earliest turn goes first.
"Final outcome": ack, dead-letter, cancel or purge; a release frees the slot too.
The shipped backends lease ready messages without a flow first and admit waiting ones
for the rest of a batch (a partitioned queue does so per partition).

The slot belongs to the message, not to a worker: a worker SIGKILLed mid-task leaves
its message leased until the lease lapses, then the reclaimer redelivers it under the
same slot. So a key never runs more than ``concurrency`` attempts at once (a live
attempt heartbeats, a dead one runs nothing) and a slot is never stuck: it passes with
the message to whoever reclaims it.

The rate limit is the generic cell rate algorithm: a rate key keeps a theoretical
arrival time ``tat``; a message is admitted at ``now`` when
``tat - now <= (burst - 1) / rate``, and admission sets
``tat = max(tat, now - credit) + 1 / rate``, where ``credit`` (0 up to half
an interval, the backend's choice) lets an admission that comes a little late keep
the key's schedule; with any such credit no window of ``k`` intervals holds more than
``k + burst`` admissions. The values of the admitted message apply: messages
of one rate key are expected to carry the same ``rate`` and ``burst``, and when they
do not, each admission uses the head message's own. A reclaim is not an admission and
spends no rate.
"""

from __future__ import annotations

import math
from typing import Literal

import msgspec

__all__ = ["FLOW_KEY_MAX_BYTES", "Flow", "FlowWait", "check_flow"]

#: The longest flow or rate key, in UTF-8 bytes (a key is stored with every message).
FLOW_KEY_MAX_BYTES = 512


class Flow(msgspec.Struct, frozen=True, kw_only=True):
    """How a message waits to be admitted: its key, and the limits that gate it.

    Attributes:
        key: The message's flow key. Messages of one key are admitted in add order;
            keys take turns (round-robin). The concurrency limit counts per key.
        concurrency: At most this many messages of `key` are admitted and not yet at
            a final outcome or released; None: no concurrency limit.
        rate: Admissions per second of `rate_key` (GCRA); None: no rate limit.
        burst: How many admissions of `rate_key` may come at once (>= 1); only with
            `rate`.
        rate_key: The key the rate counts on; None means `key`. Lets one global rate
            (say, per task) gate messages whose concurrency counts per customer.
    """

    key: str
    concurrency: int | None = None
    rate: float | None = None
    burst: int = 1
    rate_key: str | None = None

    @property
    def rate_counter(self) -> str:
        """The key admissions are counted on for the rate: `rate_key`, else `key`."""
        return self.key if self.rate_key is None else self.rate_key


class FlowWait(msgspec.Struct, frozen=True, kw_only=True):
    """Why a waiting message is not admitted yet, as `MessageLookup.lookup` reports it.

    Attributes:
        key: The message's flow key.
        reason: ``"slot"``: the key's concurrency is used up (by `holders`);
            ``"rate"``: the rate key's next admission is at `until`; ``"turn"``: it
            may be admitted by the next receive that reaches its key (behind the
            messages before it in its key, and other keys' turns).
        holders: For ``"slot"``: ids of the messages holding the key's slots.
        until: For ``"rate"``: wall-clock time (Unix seconds) the rate next allows one.
        rate_key: For ``"rate"``: the key the rate counts on.
    """

    key: str
    reason: Literal["slot", "rate", "turn"]
    holders: tuple[str, ...] = ()
    until: float | None = None
    rate_key: str | None = None


def _check_key(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(f"flow {name} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"flow {name} must not be empty")
    if "\x00" in value:
        raise ValueError(f"flow {name} must not contain NUL")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"flow {name} holds a lone surrogate: not storable text") from None
    if size > FLOW_KEY_MAX_BYTES:
        raise ValueError(f"flow {name} is {size} bytes, more than {FLOW_KEY_MAX_BYTES}")


def check_flow(flow: object) -> Flow:
    """`flow` if it is a `Flow` whose every field holds a usable value.

    Raises:
        TypeError: Not a `Flow`, or a field of the wrong type.
        ValueError: An empty, NUL-holding or over-long key; a concurrency below 1; a
            rate that is not a finite number above 0; a burst below 1.
    """
    if not isinstance(flow, Flow):
        raise TypeError(f"flow must be a Flow, not {type(flow).__name__}")
    _check_key("key", flow.key)
    if flow.rate_key is not None:
        _check_key("rate_key", flow.rate_key)
    if flow.concurrency is not None:
        if isinstance(flow.concurrency, bool) or not isinstance(flow.concurrency, int):
            raise TypeError(f"flow concurrency must be an int, got {flow.concurrency!r}")
        if flow.concurrency < 1:
            raise ValueError(f"flow concurrency must be >= 1, got {flow.concurrency}")
    if isinstance(flow.burst, bool) or not isinstance(flow.burst, int):
        raise TypeError(f"flow burst must be an int, got {flow.burst!r}")
    if flow.burst < 1:
        raise ValueError(f"flow burst must be >= 1, got {flow.burst}")
    if flow.rate is not None:
        rate = flow.rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)):
            raise TypeError(f"flow rate must be a number, got {rate!r}")
        if not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"flow rate must be a finite number of admissions/s > 0, got {rate}")
    elif flow.burst != 1 or flow.rate_key is not None:
        raise ValueError("flow burst and rate_key apply only with a rate")
    return flow
