"""The properties of the core `taskrunner.queue.Queue` contract: P1-P40 and X1-X39.

P1-P40 follow the conformance reference (``reference/conformance.md`` section 5); X1-X39
are guarantees of `Queue` the reference does not number. `taskrunner_conformance.properties`
joins them with those of the optional parts (`part_properties`) into ``PROPERTIES``.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["CORE_PROPERTIES", "Property"]


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


CORE_PROPERTIES: tuple[Property, ...] = (
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
CORE_PROPERTIES += (
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
CORE_PROPERTIES += (
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
CORE_PROPERTIES += (
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
