"""The numbered properties the suite checks, and how contract sentences become test names.

Property ids P1-P40 follow the conformance reference (``reference/conformance.md``
section 5) so results can be compared with it; ids X1-X39 are guarantees of
`taskrunner.queue.Queue` that the reference does not number, X40-X48 those of the
optional `taskrunner.queue.Scheduling` part, X50-X55 those of
`taskrunner.queue.Leadership`, X60-X66 those of `taskrunner.queue.ResultStore` and
X70-X75 those of `taskrunner.queue.MessageLookup` and X80-X84 those of
`taskrunner.queue.MessageBrowser`. Where the contract lacks the
mechanism a reference property assumes, the property is adapted and its ``adapted``
note says how; the conformance report prints that note.

Each test of the suite names the properties it checks; a property passes when all its
tests pass, fails when any fails, and is skipped (not applicable) when all are skipped.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["PROPERTIES", "Property", "contract_sentences", "contract_test_name", "property_by_id"]


class Property(NamedTuple):
    """One numbered property.

    Attributes:
        id: ``P1``...``P40`` or ``X1``...
        name: Short snake_case name.
        summary: What is checked, in one sentence.
        gate: What makes it apply: ``core`` or the capability / hook it needs.
        adapted: How it departs from the reference property, if it does.
    """

    id: str
    name: str
    summary: str
    gate: str
    adapted: str = ""


PROPERTIES: tuple[Property, ...] = (
    Property(
        "P1",
        "roundtrip_bytes",
        "bodies come back byte-identical, count 1, stable id",
        "core",
        "no per-message metadata in the contract; empty, non-UTF-8 and 64 KiB bodies",
    ),
    Property(
        "P2",
        "empty_nonblocking",
        "receive with wait 0 on an empty queue returns [] at once",
        "core",
    ),
    Property(
        "P3",
        "block_timeout",
        "a blocking receive returns [] only after its wait",
        "capabilities.blocking_receive",
    ),
    Property(
        "P4",
        "block_wakeup",
        "a blocking receive wakes when a message arrives",
        "capabilities.blocking_receive",
    ),
    Property(
        "P5",
        "batch_limits",
        "receive returns 1..max_messages while any are ready, all once",
        "core",
        "max_messages < 1 is covered by P30",
    ),
    Property(
        "P6", "enqueue_before_consumers", "messages added before any consumer are delivered", "core"
    ),
    Property(
        "P7",
        "len_semantics",
        "len is ready + delayed + in-flight; dead letters are not counted",
        "core",
    ),
    Property(
        "P8",
        "delete_queue",
        "purge removes ready and in-flight messages; receipts report lost",
        "queue.admin",
        "the contract has no delete; QueueAdmin.purge is tested",
    ),
    Property("P9", "ack_is_final", "an acked message is never delivered again", "core"),
    Property(
        "P10",
        "ack_idempotent",
        "acking a completed delivery reports it, changes nothing",
        "core",
        "'already acked' is a delivery in the returned list",
    ),
    Property(
        "P11",
        "ack_unknown_handle",
        "forged or foreign deliveries are reported, never acted on",
        "core",
        "reported in the returned list (or ValueError for a malformed id)",
    ),
    Property(
        "P12",
        "late_ack_reported",
        "an ack with a stale receipt is reported and does nothing",
        "requires_heartbeat",
        "the contract's late-ack policy is reject",
    ),
    Property(
        "P13",
        "inflight_invisible",
        "a leased message goes to nobody else while its lease lives",
        "core",
    ),
    Property(
        "P14",
        "expiry_allows_reclaim",
        "a lapsed lease is reclaimed with count + 1",
        "requires_heartbeat",
    ),
    Property(
        "P15",
        "heartbeat_prevents_steal",
        "a heartbeating owner keeps its message",
        "requires_heartbeat",
    ),
    Property(
        "P16",
        "stale_heartbeat_no_stealback",
        "a stale heartbeat is reported, takes nothing back",
        "requires_heartbeat",
    ),
    Property(
        "P17",
        "fencing_same_consumer",
        "an older receipt of the same consumer is stale",
        "requires_heartbeat",
    ),
    Property(
        "P18",
        "heartbeat_extends",
        "a heartbeat restarts the lease from the time it is made",
        "requires_heartbeat",
    ),
    Property(
        "P19",
        "heartbeat_after_ack",
        "heartbeats of completed deliveries are reported, no revival",
        "core",
        "payload removal is covered by P29",
    ),
    Property(
        "P20",
        "single_winner_reclaim",
        "racing reclaimers: each lapsed message to exactly one",
        "requires_heartbeat",
    ),
    Property(
        "P21",
        "reclaim_reaches_backlog",
        "successive reclaims find lapsed messages behind live ones",
        "requires_heartbeat",
    ),
    Property(
        "P22", "heartbeat_counter_stable", "heartbeats never change the delivery count", "core"
    ),
    Property(
        "P23",
        "crash_redelivery",
        "a vanished consumer's messages are reclaimed after the lease",
        "requires_heartbeat",
    ),
    Property(
        "P24",
        "consumer_cleanup_safe",
        "an idle consumer's pending messages stay reclaimable",
        "requires_heartbeat",
        "other consumers churn meanwhile; with consumer_cleanup, the clean-up spares the holder",
    ),
    Property(
        "P25",
        "release_immediate",
        "a released message comes back after its delay, count + 1",
        "core",
    ),
    Property(
        "P26",
        "max_deliveries",
        "dead-lettered at its last delivery, keeps body/reason/count",
        "core",
        "the cap is the runner's; the suite checks exact counts and dead_letter",
    ),
    Property(
        "P27", "delivery_count_exposed", "count is 1 first, +1 per reclaim or release", "core"
    ),
    Property(
        "P28",
        "malformed_payload_isolated",
        "an unreadable entry never breaks receive or loops",
        "hook inject_raw",
    ),
    Property(
        "P29",
        "payload_removed_underneath",
        "a vanished payload is reported by heartbeat, dead-lettered, never redelivered",
        "hook remove_payload",
        "an ack of it may complete it or report it (the contract does not say)",
    ),
    Property(
        "P30",
        "invalid_arguments",
        "invalid arguments raise ValueError/TypeError, change nothing",
        "core",
    ),
    Property(
        "P31",
        "no_overlapping_live_leases",
        "history: no two live leases on one message",
        "requires_heartbeat",
    ),
    Property(
        "P32",
        "at_least_once_chaos",
        "history under crashes and expiries: nothing lost",
        "core",
        "crashes and expiries only when requires_heartbeat",
    ),
    Property(
        "P33",
        "no_dup_without_faults",
        "no faults, work shorter than the lease: no duplicates",
        "core",
    ),
    Property(
        "P34",
        "concurrent_producers",
        "concurrent adds: unique ids, every message delivered",
        "core",
    ),
    Property("P35", "ordering", "a single consumer receives in add order", "capabilities.ordering"),
    Property(
        "P36",
        "bounded_storage",
        "storage stays bounded over many add/receive/ack cycles",
        "hook storage_size",
    ),
    Property(
        "P37",
        "survives_restart",
        "unacked messages survive a backend restart, acked stay gone",
        "capabilities.persistent + hook restart_backend",
    ),
    Property(
        "P38",
        "durable_enqueue_crash",
        "an added message survives a crash right after add",
        "capabilities.durable_enqueue + hook crash_backend",
    ),
    Property(
        "P39",
        "outage_errors_typed",
        "outages raise BackendError subclasses; work resumes",
        "hooks stop_backend/start_backend",
    ),
    Property(
        "P40",
        "stateful_model",
        "random operations agree with an independent reference model",
        "harness clock or hook age_lease",
    ),
    Property(
        "X1",
        "aclose_semantics",
        "aclose is idempotent; other methods then raise QueueClosedError",
        "core",
    ),
    Property(
        "X2",
        "dead_letter_admin",
        "dead letters are listed, retried and purged exactly once",
        "queue.admin",
    ),
    Property(
        "X3",
        "cancel_safe_receive",
        "a cancelled receive leaves no message leased unseen",
        "capabilities.cancel_safe_receive",
    ),
    Property(
        "X4",
        "worker_registry",
        "worker entries come back as published (attempt counts included), refresh in "
        "place, expire after their TTL, remove idempotently",
        "queue.worker_registry",
    ),
    Property(
        "X5",
        "lease_travels",
        "each lease lasts what its holder was granted, whatever the reclaimer's lease",
        "requires_heartbeat",
    ),
    Property(
        "X6",
        "receive_skips_lapsed",
        "receive never hands out a lapsed lease; only reclaim does",
        "requires_heartbeat",
    ),
    Property(
        "X7",
        "released_receipt_stale",
        "a released receipt reports lost before and after redelivery",
        "core",
    ),
    Property(
        "X8",
        "ids_never_reused",
        "ids of acked, dead, purged and retried messages are never issued again",
        "core",
    ),
)

# Timing edges (cases/boundaries.py): each probed just inside and just outside the
# boundary, p = lease_precision_seconds, with taskrunner_conformance.edges.
PROPERTIES += (
    Property(
        "X10",
        "lease_edge_receive",
        "a lease granted by receive is live below lease - p, reclaimable above lease + p",
        "requires_heartbeat",
    ),
    Property(
        "X11",
        "lease_edge_heartbeat",
        "a heartbeat restarts the lease with the length it was granted, from the heartbeat",
        "requires_heartbeat",
    ),
    Property(
        "X12",
        "lease_edge_reclaim",
        "a lease granted by reclaim lasts the reclaimer's lease_seconds",
        "requires_heartbeat",
    ),
    Property(
        "X13",
        "lease_lengths_vary",
        "leases of several lengths on one queue each lapse at their own length",
        "requires_heartbeat",
    ),
    Property(
        "X14",
        "closed_handle_leases",
        "leases taken through a closed handle stay live to their length, then lapse",
        "requires_heartbeat",
    ),
    Property(
        "X15",
        "release_delay_edges",
        "a released message is not delivered before delay - p, received after delay + p",
        "core",
    ),
    Property(
        "X16",
        "receive_wait_edges",
        "receive returns [] by wait + p; a blocking one not before wait - p",
        "core (the lower edge: capabilities.blocking_receive)",
    ),
    Property(
        "X17",
        "blocking_wakes_on_delay",
        "a waiting receive wakes when a released message's delay ends",
        "capabilities.blocking_receive",
    ),
    Property(
        "X18",
        "registry_ttl_edges",
        "a worker entry is listed below ttl - p and gone above ttl + p",
        "queue.worker_registry",
    ),
    Property(
        "X19",
        "cleanup_idle_edges",
        "remove_idle_consumers keeps consumers idle below the threshold - p, removes "
        "them above it + p, never one holding a message",
        "queue.consumer_cleanup",
    ),
)

# Fencing, arguments, closed handles and reclaim progress, checked by fixed tests.
PROPERTIES += (
    Property(
        "X20",
        "stale_heartbeat_fenced",
        "a heartbeat with a receipt of any earlier lease is reported lost and changes nothing",
        "core; kinds built by reclaims: requires_heartbeat",
    ),
    Property(
        "X21",
        "stale_ack_fenced",
        "an ack with a receipt of any earlier lease is reported lost and changes nothing",
        "core; kinds built by reclaims: requires_heartbeat",
    ),
    Property(
        "X22",
        "stale_release_fenced",
        "a release with a receipt of any earlier lease is reported lost and changes nothing",
        "core; kinds built by reclaims: requires_heartbeat",
    ),
    Property(
        "X23",
        "stale_dead_letter_fenced",
        "a dead_letter with a receipt of any earlier lease is reported lost, changes nothing",
        "core; kinds built by reclaims: requires_heartbeat",
    ),
    Property(
        "X24",
        "mixed_batch_exact",
        "a batch of current and stale deliveries returns exactly the stale ones, acts on the rest",
        "core",
    ),
    Property(
        "X25",
        "valid_edge_arguments_accepted",
        "wait 0 and tiny waits, tiny leases, whole-number durations, delay 0 are accepted",
        "core",
    ),
    Property(
        "X26",
        "reclaim_reaches_every_position",
        "one lapsed message among 120 in flight (oldest, middle, newest, behind the cursor) "
        "is reclaimed within 2 * ceil(in_flight / max_messages) + 2 calls",
        "requires_heartbeat",
    ),
    Property(
        "X27",
        "remove_consumers_exact",
        "remove_consumers forgets exactly the named consumers holding no message, each once",
        "queue.consumer_cleanup",
    ),
)

# Data shapes, the admin protocol, stats, ordering, batch limits and concurrent wake-ups:
# each checked where it could break (issue 9).
PROPERTIES += (
    Property(
        "X30",
        "body_shapes",
        "0 B to 1 MiB, all byte values, random binary, in one add: exact on every path",
        "core",
        "paths: receive, release, reclaim, dead letters (with admin or hook), retry (admin)",
    ),
    Property(
        "X31",
        "dead_letter_reason_whole",
        "8 KiB, non-ASCII, multi-line, quoted, NUL and control-character reasons are kept whole",
        "queue.admin or hook dead_letters",
    ),
    Property(
        "X32",
        "fifo_across_handles",
        "with fifo, a consumer receives in the order adds completed on several handles",
        "capabilities.ordering",
    ),
    Property(
        "X33",
        "max_batch_clamped",
        "receive and reclaim above max_batch return at most max_batch and lease nothing more",
        "capabilities.max_batch",
    ),
    Property(
        "X34",
        "concurrent_wakeups",
        "one add wakes as many waiting receivers as it has messages; nothing leased unseen",
        "capabilities.blocking_receive",
    ),
    Property(
        "X35",
        "purge_all_but_dead",
        "purge deletes ready, delayed and in-flight messages, counts them, keeps dead letters",
        "queue.admin",
    ),
    Property(
        "X36",
        "retry_makes_new_messages",
        "retried dead letters return as new messages (new id, count 1, same body); "
        "unknown ids are skipped",
        "queue.admin",
    ),
    Property(
        "X37",
        "dead_letter_listing",
        "list_dead_letters gives the oldest limit (default 100), oldest first, every field right",
        "queue.admin or hook dead_letters",
        "without queue.admin only order and fields are checked, through the hook",
    ),
    Property(
        "X38",
        "delete_queue",
        "delete_queue removes messages, dead letters, consumers, workers; a reused queue is empty",
        "queue.admin",
    ),
    Property(
        "X39",
        "stats_classify",
        "stats tell ready, delayed, in-flight and dead apart; ages are None or plausible",
        "core",
    ),
)

# The optional Scheduling part (cases/scheduling.py): delayed and unique adds, cancel.
# Each gate names the capability flag and the part; a flag claimed without the part
# fails, a flag not claimed skips with the reason.
PROPERTIES += (
    Property(
        "X40",
        "delayed_add_edges",
        "a delayed add (delay_seconds or due_at) is not delivered before due - p and is "
        "received after due + p, with count 1; due_at in the past and delay 0 are ready now",
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
        "within one batch",
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
        "a key with unique_seconds is held below unique_seconds - p and free above it + p",
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
        "changes nothing; the in-flight one is still acked",
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
PROPERTIES += (
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
        "renew and resign with a stale token or another holder's name return None/False and "
        "change nothing",
        "capabilities.leadership + queue.leadership",
    ),
    Property(
        "X54",
        "fire_once",
        "an instant is fired at most once (also by two handles at once), only under the latest "
        "token (a lapsed one nobody took still fires), adding a normal ready message; "
        "fire_records returns the latest",
        "capabilities.leadership + queue.leadership",
    ),
    Property(
        "X55",
        "leadership_arguments",
        "invalid leadership arguments raise ValueError/TypeError and change nothing",
        "capabilities.leadership + queue.leadership",
    ),
)

# The optional ResultStore part (cases/results.py): task results by message id, with TTLs.
PROPERTIES += (
    Property(
        "X60",
        "result_ttl_edges",
        "a stored result is returned byte for byte (empty, every byte value, 1 MiB) below "
        "ttl - p and gone above ttl + p",
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
PROPERTIES += (
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
PROPERTIES += (
    Property(
        "X80",
        "browse_waiting_pages",
        "waiting messages are listed once each with their body and count, paged by 5, "
        "by 1 and in one page of the cap alike, in add order on a FIFO backend; leased "
        "ones leave the listing and a released one comes back with its count",
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
)

_BY_ID = {prop.id: prop for prop in PROPERTIES}


def property_by_id(property_id: str) -> Property:
    """The property with id `property_id`.

    Raises:
        KeyError: No such property.
    """
    return _BY_ID[property_id]


def contract_sentences(docstring: str) -> list[str]:
    """The guarantee bullets (``* ...``) of a contract docstring, one sentence each."""
    sentences = []
    for line in docstring.splitlines():
        stripped = line.strip()
        if stripped.startswith("* "):
            sentences.append(stripped[2:])
    return sentences


def contract_test_name(sentence: str) -> str:
    """The test name that reads the same as a contract sentence.

    Articles at the start are dropped, ``+`` reads "plus", ``[]`` reads "empty",
    CamelCase names become snake_case and punctuation becomes underscores:
    "A heartbeat never changes the delivery count." becomes
    ``test_heartbeat_never_changes_the_delivery_count``.
    """
    text = sentence.replace("`[]`", "empty").replace("[]", "empty").replace("+", " plus ")
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text)
    words = re.findall(r"[a-z0-9]+", text.lower())
    if words and words[0] in ("a", "an", "the"):
        words = words[1:]
    return "test_" + "_".join(words)
