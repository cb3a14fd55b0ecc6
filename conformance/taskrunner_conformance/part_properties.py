"""The properties of the optional parts of the contract: X40-X105.

Scheduling (X40-X48), Leadership (X50-X55), ResultStore (X60-X66), MessageLookup
(X70-X75), MessageBrowser (X80-X85), flow control (X90-X99, X105) and priorities
(X100-X104).
`taskrunner_conformance.properties` joins them with the core ones into ``PROPERTIES``.
"""

from __future__ import annotations

from .core_properties import Property

__all__ = ["PART_PROPERTIES"]

PART_PROPERTIES: tuple[Property, ...] = ()

# The optional Scheduling part (cases/scheduling.py and the modules it joins): delayed
# and unique adds, cancel.
# Each gate names the capability flag and the part; a flag claimed without the part
# fails, a flag not claimed skips with the reason.
PART_PROPERTIES += (
    Property(
        "X40",
        "delayed_add_edges",
        "a delayed add (delay_seconds or due_at) is not delivered before due - p and is "
        "received after due + p, with count 1; due_at in the past and delay 0 are ready now; a "
        "blocking receive waiting on an empty queue wakes when one falls due, not before",
        "capabilities.delayed_add + queue.scheduling",
    ),
    Property(
        "X41",
        "delayed_add_counted",
        "a delayed message counts as delayed in stats and in len until due, then as ready; "
        "its id is unique among plain and delayed adds",
        "capabilities.delayed_add + queue.scheduling",
    ),
    Property(
        "X42",
        "unique_key_held",
        "a request with a held key adds nothing and returns the holder's id, while the holder "
        "is queued, delayed, in flight, released (with or without delay) or reclaimed, and "
        "within one batch; a refused request changes nothing, the key's expiry included",
        "capabilities.unique_add + queue.scheduling",
    ),
    Property(
        "X43",
        "unique_key_concurrent",
        "concurrent requests with one key, from several handles, add exactly one message",
        "capabilities.unique_add + queue.scheduling",
    ),
    Property(
        "X44",
        "unique_key_freed_at_outcome",
        "a key is freed by ack, dead_letter and purge of its message, never by release or "
        "reclaim, and an old message's ack frees no key another message took",
        "capabilities.unique_add + queue.scheduling",
    ),
    Property(
        "X45",
        "unique_seconds_edges",
        "a key with unique_seconds is held below unique_seconds - p and free above it + p; "
        "unique_seconds=0 is valid and frees the key at once",
        "capabilities.unique_add + queue.scheduling",
    ),
    Property(
        "X46",
        "cancel_removes",
        "cancelling a ready, delayed or released-with-delay message returns True; it is never "
        "delivered (after its due time, after reclaims) and its key is free; a cancel racing "
        "receive cancels or delivers each message, exactly one",
        "capabilities.cancel + queue.scheduling",
    ),
    Property(
        "X47",
        "cancel_refuses",
        "cancelling an in-flight, acked, dead, unknown or cancelled message returns False and "
        "changes nothing; the in-flight one is still acked and its unique key stays held",
        "capabilities.cancel + queue.scheduling",
    ),
    Property(
        "X48",
        "scheduling_arguments",
        "invalid requests and options the backend does not claim raise ValueError/TypeError "
        "and add nothing",
        "queue.scheduling",
    ),
)

# The optional Leadership part (cases/leadership.py): leader leases and fire-once records.
PART_PROPERTIES += (
    Property(
        "X50",
        "leader_exclusive",
        "at most one holder has a live lease of an election, also when several acquire at once",
        "capabilities.leadership + queue.leadership",
    ),
    Property(
        "X51",
        "leader_lease_edges",
        "a leader lease is held below ttl - p and lapsed above ttl + p, counted from its last "
        "acquire or renew (a lapsed one nobody took renews)",
        "capabilities.leadership + queue.leadership",
    ),
    Property(
        "X52",
        "leader_tokens_grow",
        "every change of holder and every retake after a lapse issues a larger token; a "
        "renew or a live re-acquire keeps it",
        "capabilities.leadership + queue.leadership",
    ),
    Property(
        "X53",
        "leader_stale_token",
        "renew and resign with a stale token or another holder's name, or after a resign, "
        "return None/False and change nothing",
        "capabilities.leadership + queue.leadership",
    ),
    Property(
        "X54",
        "fire_once",
        "an instant is fired at most once (also by two handles at once), only under the latest "
        "token (a lapsed or resigned one nobody took still fires), adding a normal ready "
        "message; fire_records returns the latest",
        "capabilities.leadership + queue.leadership",
    ),
    Property(
        "X55",
        "leadership_arguments",
        "invalid leadership arguments raise ValueError/TypeError and change nothing",
        "capabilities.leadership + queue.leadership",
    ),
)

# The optional ResultStore part (cases/results.py and the modules it joins): task results
# by message id, with TTLs.
PART_PROPERTIES += (
    Property(
        "X60",
        "result_ttl_edges",
        "a stored result is returned byte for byte (empty, every byte value, 1 MiB) below "
        "ttl - p and gone above ttl + p, also 1,000 expiring at once",
        "capabilities.results + queue.results",
    ),
    Property(
        "X61",
        "result_rewrite",
        "a later write (another handle, later in one batch) replaces the body and restarts "
        "the TTL, longer or shorter, from the later write",
        "capabilities.results + queue.results",
    ),
    Property(
        "X62",
        "result_ids_independent",
        "ids differing only by case, a prefix or a suffix, and other queues, keep their own "
        "results; unknown ids have none; get_results answers in order, duplicates too",
        "capabilities.results + queue.results",
    ),
    Property(
        "X63",
        "wait_result_wakes",
        "wait_result returns a result stored while it waits (by another handle) soon after "
        "the put, not at its timeout; one already stored at once; other ids do not wake it",
        "capabilities.results + queue.results (the bound: capabilities.result_notify)",
    ),
    Property(
        "X64",
        "wait_result_timeout_edges",
        "wait_result with nothing stored returns None not before timeout - p and by "
        "timeout + p; timeout 0 returns at once",
        "capabilities.results + queue.results",
    ),
    Property(
        "X65",
        "results_deleted",
        "delete_results removes the named results and counts those that existed (not "
        "expired ones); delete_queue forgets every result, other queues keep theirs",
        "capabilities.results + queue.results (delete_queue: queue.admin)",
    ),
    Property(
        "X66",
        "results_arguments",
        "a bad TTL, body, item or id raises ValueError/TypeError and stores nothing, also "
        "when the rest of the batch is good",
        "capabilities.results + queue.results",
    ),
)

# The optional MessageLookup part (cases/lookup.py): the state of messages by id.
PART_PROPERTIES += (
    Property(
        "X70",
        "lookup_ready",
        "a message never delivered is ready with delivery count 0 and its own body, seen "
        "through any handle",
        "capabilities.lookup + queue.lookup",
    ),
    Property(
        "X71",
        "lookup_delayed_edges",
        "a delayed add is delayed below due - p and ready above due + p, count 0",
        "capabilities.lookup + queue.lookup + capabilities.delayed_add",
    ),
    Property(
        "X72",
        "lookup_running",
        "a leased message is running with its holder and count: after receive, a heartbeat, "
        "a lapse without reclaim, and a reclaim by another consumer (count + 1)",
        "capabilities.lookup + queue.lookup",
    ),
    Property(
        "X73",
        "lookup_released",
        "a released message is ready (no delay) or delayed below delay - p and ready above "
        "delay + p, keeping the count it had until redelivered",
        "capabilities.lookup + queue.lookup",
    ),
    Property(
        "X74",
        "lookup_dead",
        "a dead letter is dead under its original id with its reason and count; once "
        "retried or purged the original id has no state",
        "capabilities.lookup + queue.lookup",
    ),
    Property(
        "X75",
        "lookup_gone",
        "acked, cancelled, purged, deleted, unknown and malformed ids have no state (None, "
        "never an error); a batch is answered in order, duplicates too",
        "capabilities.lookup + queue.lookup",
    ),
)

# The optional MessageBrowser part (cases/browse.py): keyset-paged listings.
PART_PROPERTIES += (
    Property(
        "X80",
        "browse_waiting_pages",
        "waiting messages are listed once each with their body and count, paged by 5, "
        "by 1 and in one page of the cap alike, in add order on a FIFO backend; leased "
        "ones leave the listing and a released one comes back with its count, also one "
        "released with a delay once due; a message that stays put while others move "
        "between pages is listed exactly once",
        "capabilities.browse + queue.browse",
    ),
    Property(
        "X81",
        "browse_in_flight",
        "leased messages are listed once each with their holder, count, body, idle time "
        "and lease; lapsed but not reclaimed, and reclaimed by another consumer (count + 1)",
        "capabilities.browse + queue.browse",
    ),
    Property(
        "X82",
        "browse_read_only",
        "browsing changes no stats, no lease (a heartbeat holds; a lapsed lease browsed "
        "is still reclaimed) and no delivery count (receive then gets count 1)",
        "capabilities.browse + queue.browse",
    ),
    Property(
        "X83",
        "browse_not_listed",
        "acked, dead-lettered, released-with-delay and delayed-added messages are in "
        "neither listing",
        "capabilities.browse + queue.browse",
    ),
    Property(
        "X84",
        "browse_arguments",
        "limits below 1 or above the cap, unknown states and malformed cursors raise "
        "ValueError and change nothing; a closed handle raises QueueClosedError",
        "capabilities.browse + queue.browse",
    ),
    Property(
        "X85",
        "browse_body_bytes",
        "with body_bytes, a longer body is listed as its first body_bytes bytes with "
        "body_size its whole length, a shorter one whole; a body_bytes that is no size "
        "raises ValueError",
        "capabilities.browse + queue.browse taking body_bytes (contract 2.1)",
    ),
    Property(
        "X90",
        "flow_waiting",
        "messages waiting for admission count as ready in stats and len, and a "
        "receive leases only those admitted, their first lease with delivery count 1",
        "capabilities.flow_control",
    ),
    Property(
        "X91",
        "flow_concurrency",
        "receivers racing on two handles admit exactly concurrency messages of a key; "
        "an ack admits exactly one more, waking a receive blocked on the key",
        "capabilities.flow_control",
    ),
    Property(
        "X92",
        "flow_outcomes_free_slots",
        "ack, dead-letter, release and purge of an admitted message free its slot",
        "capabilities.flow_control",
    ),
    Property(
        "X93",
        "flow_slot_through_reclaim",
        "an admitted message keeps its slot while its lease lapses and is reclaimed; "
        "the key's next message is admitted only after the reclaimed one's ack",
        "capabilities.flow_control + a lapsing lease",
    ),
    Property(
        "X94",
        "flow_key_order",
        "a key admits its messages in add order, and a released one waits behind them",
        "capabilities.flow_control",
    ),
    Property(
        "X95",
        "flow_round_robin",
        "one receive over keys of 5, 2 and 1 messages admits them in turns, the key "
        "served least recently first",
        "capabilities.flow_control + capabilities.ordering",
    ),
    Property(
        "X96",
        "flow_backlog_fairness",
        "behind a key with a backlog of 40, messages of two other keys come within 6 "
        "receives of one message",
        "capabilities.flow_control",
    ),
    Property(
        "X97",
        "flow_rate",
        "a rate key admits its burst at once, no more inside one interval, and one more "
        "within one interval and a margin, on the backend's clock",
        "capabilities.flow_control",
    ),
    Property(
        "X98",
        "flow_dead_letter_retry",
        "a retried dead letter waits under its flow again: not admitted while its key's "
        "slot is held, admitted once it frees",
        "capabilities.flow_control + queue.admin",
    ),
    Property(
        "X99",
        "flow_arguments",
        "malformed flows (bad keys, limits below 1, rates that are no finite positive "
        "number) and, on a backend not claiming flow control, any flow add nothing",
        "queue.scheduling",
    ),
    Property(
        "X105",
        "flow_waiting_lookup",
        "a waiting message looked up is ready and, where the backend says why it waits, "
        "names its key's slot holders or the time its rate allows one",
        "capabilities.flow_control + queue.lookup",
    ),
    Property(
        "X100",
        "priority_order",
        "messages of priorities 0 5 9 5 0 9 are received 9 9 5 5 0 0, each level in add "
        "order on a FIFO backend, in one batch too",
        "capabilities.priorities",
    ),
    Property(
        "X101",
        "priority_kept",
        "a priority-9 message released, retried from the dead letters or added with a "
        "delay comes before ready priority-5 ones",
        "capabilities.priorities",
    ),
    Property(
        "X102",
        "priority_default",
        "a request without a priority is received after one with priority 1",
        "capabilities.priorities",
    ),
    Property(
        "X103",
        "priority_aging",
        "a priority-0 message ready six agings minus a margin loses to a fresh priority "
        "5, plus a margin beats one",
        "capabilities.priorities + priority_aging_seconds (a fake clock when long)",
    ),
    Property(
        "X104",
        "priority_arguments",
        "priorities -1, 10, 1.5, True, '5' and one beside a flow are refused with the "
        "batch; unclaimed, any priority but 0 is refused naming priorities",
        "queue.scheduling",
    ),
)
