"""The SQL of flow control on PostgreSQL: `FLOW_ADMIT`, the admission function (internal).

A message added with a flow is a ``messages`` row with ``waiting`` set and its flow's
fields in ``flow_*`` columns. Its key has a ``flow_keys`` row (created by the add):

* ``turn``: a number from the sequence ``flow_turns``, drawn when the key's row is
  created (the add of its oldest waiting message) and at each admission; the lowest
  turn goes first (round-robin, least recently served first);
* ``ready_at``: when the key may next admit (its head's due time, or the instant its
  rate allows one); a key without waiting messages is deleted;
* ``slot_blocked``: its head's concurrency was found used up. It is cleared by the next
  admission after a slot frees: the triggers on ``messages`` record every freed slot
  in ``flow_wakes`` (an insert, taking no lock on the key) and NOTIFY the queue;
* ``time_blocked``: it waits for ``ready_at`` (rate or due time); each admission first
  puts back the keys whose time came (index ``flow_keys_by_time``).

Only keys with neither flag are in the ring (index ``flow_keys_by_turn``), so blocked
keys cost an admission nothing, like the memory and Redis backends' blocked sets.

The slot is the admitted row itself: a row of the key with ``waiting`` false (leased,
or lapsed and not yet reclaimed). Ack, dead-letter and purge delete it, release sets
``waiting`` again, cancel never touches a leased row, reclaim keeps it: the count of
those rows is the key's held slots, with nothing to keep in step.

Two receivers never admit from one key at once: `FLOW_ADMIT` takes a key with
``FOR UPDATE SKIP LOCKED`` on its ``flow_keys`` row and holds the lock until its
statement's transaction commits, and counts the held slots after taking it (each
statement of a PL/pgSQL function reads a fresh snapshot under READ COMMITTED, so it sees
the admissions committed by the previous holder of the lock). A rate key's ``tat`` row
in ``flow_rates`` (created by the add, in rate key order) is taken the same way. An
admission waits for no lock while it holds one: a key whose rate row another admission
holds is passed over for this call, and so is a head row being deleted (cancel, purge)
at that moment. Key locks are waited for only in key order (adds and the unblocking of
freed keys), so no lock cycle can form with adds, acks, cancels or purges.

Times are the server's: ``clock_timestamp()``, GCRA's ``tat`` in Unix seconds of it.
"""

from __future__ import annotations

__all__ = ["FLOW_ADMIT", "GCRA_SLACK_SECONDS"]

#: Slack on GCRA's comparison: a float8 of Unix seconds resolves about 0.4 µs, so an
#: admission exactly one interval later is not refused for the rounding of its sum.
GCRA_SLACK_SECONDS = 1e-6

FLOW_ADMIT = """CREATE OR REPLACE FUNCTION {s}.flow_admit(
    q text, need integer, consumer text, lease double precision
) RETURNS TABLE (a_id bigint, a_body bytea, a_count integer, a_n integer)
LANGUAGE plpgsql AS $fn$
DECLARE
    freed record;
    k record;
    h record;
    held integer;
    now_ts timestamptz;
    now_s double precision;
    tat_s double precision;
    wake double precision;
    got integer := 0;
    passed text[] := ARRAY[]::text[];
BEGIN
    IF need <= 0 THEN
        RETURN;
    END IF;
    -- Keys whose slots freed since the last admission may admit again. The records are
    -- taken SKIP LOCKED (another admission consumes the rest), the keys in key order.
    FOR freed IN
        WITH w AS (
            DELETE FROM {s}.flow_wakes fw
            WHERE fw.ctid IN (
                SELECT x.ctid FROM {s}.flow_wakes x WHERE x.queue = q FOR UPDATE SKIP LOCKED
            )
            RETURNING fw.key, fw.at
        )
        SELECT w.key, min(w.at) AS at FROM w GROUP BY w.key ORDER BY w.key
    LOOP
        -- Created when missing: a released message may be its key's only waiting one.
        INSERT INTO {s}.flow_keys (queue, key, turn, ready_at)
        VALUES (q, freed.key, nextval('{s}.flow_turns'), freed.at)
        ON CONFLICT (queue, key) DO UPDATE
        SET slot_blocked = false, ready_at = least({s}.flow_keys.ready_at, EXCLUDED.ready_at);
    END LOOP;
    now_ts := clock_timestamp();
    now_s := extract(epoch FROM now_ts);
    -- Keys whose time came rejoin the ring. A key locked elsewhere is left for the next
    -- admission (its time stays in _NEXT_DUE, so a waiting receive comes back for it).
    UPDATE {s}.flow_keys fk SET time_blocked = false
    WHERE fk.ctid IN (
        SELECT x.ctid FROM {s}.flow_keys x
        WHERE x.queue = q AND x.time_blocked AND NOT x.slot_blocked AND x.ready_at <= now_ts
        FOR UPDATE SKIP LOCKED
    );
    WHILE got < need LOOP
        SELECT fk.key INTO k FROM {s}.flow_keys fk
        WHERE fk.queue = q AND NOT fk.slot_blocked AND NOT fk.time_blocked
          AND fk.key <> ALL(passed)
        ORDER BY fk.turn
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        SELECT m.id, m.available_at, m.flow_concurrency, m.flow_rate, m.flow_burst,
               coalesce(m.flow_rate_key, m.flow_key) AS rate_key
        INTO h
        FROM {s}.messages m
        WHERE m.queue = q AND m.flow_key = k.key AND m.waiting
        ORDER BY m.available_at, m.id
        LIMIT 1
        -- Only a delete (cancel, purge) locks a waiting row: skipped, it is going away.
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF EXISTS (SELECT 1 FROM {s}.messages m
                       WHERE m.queue = q AND m.flow_key = k.key AND m.waiting) THEN
                passed := passed || k.key;  -- its waiting rows are being deleted
                CONTINUE;
            END IF;
            -- No waiting message: the key is idle. Its slots are counted from the
            -- admitted rows, so nothing is lost; the next add creates it again.
            DELETE FROM {s}.flow_keys fk WHERE fk.queue = q AND fk.key = k.key;
            CONTINUE;
        END IF;
        IF h.available_at > now_ts THEN
            UPDATE {s}.flow_keys fk SET ready_at = h.available_at, time_blocked = true
            WHERE fk.queue = q AND fk.key = k.key;
            CONTINUE;
        END IF;
        IF h.flow_concurrency IS NOT NULL THEN
            SELECT count(*) INTO held FROM {s}.messages m
            WHERE m.queue = q AND m.flow_key = k.key AND NOT m.waiting;
            IF held >= h.flow_concurrency THEN
                UPDATE {s}.flow_keys fk SET slot_blocked = true
                WHERE fk.queue = q AND fk.key = k.key;
                CONTINUE;
            END IF;
        END IF;
        IF h.flow_rate IS NOT NULL THEN
            SELECT r.tat INTO tat_s FROM {s}.flow_rates r
            WHERE r.queue = q AND r.rate_key = h.rate_key FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                IF EXISTS (SELECT 1 FROM {s}.flow_rates r
                           WHERE r.queue = q AND r.rate_key = h.rate_key) THEN
                    passed := passed || k.key;  -- another admission holds the rate
                    CONTINUE;
                END IF;
                -- The add creates it; gone only if a purge raced that add.
                tat_s := 0;
                INSERT INTO {s}.flow_rates (queue, rate_key, tat)
                VALUES (q, h.rate_key, 0) ON CONFLICT DO NOTHING;
            END IF;
            wake := tat_s - (h.flow_burst - 1) / h.flow_rate;
            IF wake > now_s + GCRA_SLACK THEN
                UPDATE {s}.flow_keys fk SET ready_at = to_timestamp(wake), time_blocked = true
                WHERE fk.queue = q AND fk.key = k.key;
                CONTINUE;
            END IF;
            UPDATE {s}.flow_rates r SET tat = greatest(tat_s, now_s) + 1.0 / h.flow_rate
            WHERE r.queue = q AND r.rate_key = h.rate_key;
        END IF;
        UPDATE {s}.messages m SET
            waiting = false,
            owner = consumer,
            delivery_count = m.delivery_count + 1,
            leased_at = clock_timestamp(),
            lease_seconds = lease,
            expires_at = clock_timestamp() + lease * interval '1 second'
        WHERE m.id = h.id
        RETURNING m.id, m.body, m.delivery_count INTO a_id, a_body, a_count;
        got := got + 1;
        a_n := got;
        UPDATE {s}.flow_keys fk SET turn = nextval('{s}.flow_turns')
        WHERE fk.queue = q AND fk.key = k.key;
        RETURN NEXT;
    END LOOP;
END
$fn$""".replace("GCRA_SLACK", repr(GCRA_SLACK_SECONDS))
