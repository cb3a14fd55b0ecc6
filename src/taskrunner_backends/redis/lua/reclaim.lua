-- Take over lapsed leases, each judged by its holder's own lease, following a cursor.
--
-- KEYS: 1 stream, 2 dead-letter stream, 3 delayed zset (unused), 4 parked (unused),
--       5 origins hash, 6 doorbell, 7 moved hash, 8 uniques (unused),
--       9 dead letters by original id
-- ARGV: 1 group, 2 consumer (with its lease suffix), 3 lease ms assumed for holders
--       whose name carries none, 4 count, 5 cursor ("0-0": from the start),
--       6 PEL entries to scan at most, 7 flow-control prefix
-- Returns {next cursor, payloads found deleted, the priorities above 0 in use joined by
--          commas, id, delivery count, fields, ...}
--
-- Priorities: the caller runs one call per priority, with that priority's stream
-- (``stream:<p>``) as KEYS[1] and that stream's own cursor.
--
-- A consumer's name ends in "~<lease ms>": the lease every delivery it holds was
-- granted (see queue.py). An entry is lapsed when its idle time exceeds its holder's
-- lease, whatever lease the reclaimer itself uses. XCLAIM with that lease as its
-- min-idle-time is the claim; the whole scan runs in one script, so no heartbeat can
-- slip between the check and the claim. A reclaimed message of flow control keeps the
-- slot it was admitted with: reclaim admits nothing and spends no rate. One whose
-- payload was deleted is dead-lettered, and gives its slot back.

local stream, dead, origins, moved, dead_ids = KEYS[1], KEYS[2], KEYS[5], KEYS[7], KEYS[9]
local group, consumer, default_lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local need, cursor, budget = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local GONE = 'payload removed from the stream while pending'
flow.prefix, flow.bell = ARGV[7], KEYS[6]

-- Dead-letter times in ms with microseconds, as fenced.lua writes them.
local function stamp()
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  return string.format('%d.%03d', tonumber(t[1]) * 1000 + math.floor(us / 1000), us % 1000)
end

local items = {}
local deleted = 0
local scanned = 0
while need > 0 and scanned < budget do
  local start = '-'
  if cursor ~= '0-0' then
    start = '(' .. cursor
  end
  local page = math.min(budget - scanned, 500)
  local pending = redis.call('XPENDING', stream, group, start, '+', page)
  local examined = 0
  for _, p in ipairs(pending) do
    local id, owner, idle, count = p[1], p[2], tonumber(p[3]), tonumber(p[4])
    cursor = id
    examined = examined + 1
    local lease = tonumber(string.match(owner, '~(%d+)$')) or default_lease
    if idle > lease then
      local claimed = redis.call('XCLAIM', stream, group, consumer, lease, id)
      if #claimed > 0 and claimed[1] then
        items[#items + 1] = id
        items[#items + 1] = count + 1
        items[#items + 1] = claimed[1][2]
        need = need - 1
      else
        -- 7.0+: XCLAIM dropped the PEL entry because its payload was deleted. Record
        -- the message it held and its real delivery count as a dead letter.
        local message_id, total = id, count
        local origin = redis.call('HGET', origins, id)
        if origin then
          local mid, base = string.match(origin, '^([^/]+)/(%d+)$')
          if mid then
            message_id, total = mid, count + tonumber(base)
          end
          redis.call('HDEL', origins, id)
          redis.call('HDEL', moved, message_id)
          flow_free(message_id)
        end
        local dead_id = redis.call('XADD', dead, '*', 'b', '', 'r', GONE, 'o', message_id,
          'c', total, 't', stamp())
        redis.call('HSET', dead_ids, message_id, dead_id)
        deleted = deleted + 1
      end
      if need <= 0 then
        break
      end
    end
  end
  scanned = scanned + examined
  if examined == #pending and #pending < page then
    -- The end of the PEL: the next call starts over from the oldest entry.
    cursor = '0-0'
    break
  end
end

-- The priorities above 0 in use: the fields of the hash `levels` (HGETALL: only
-- commands of the documented ACL).
local function levels_in(key)
  local flat, out = redis.call('HGETALL', key), {}
  for i = 1, #flat, 2 do
    out[#out + 1] = flat[i]
  end
  return out
end
local levels = levels_in(string.sub(dead, 1, -5) .. 'levels')
local out = {cursor, deleted, table.concat(levels, ',')}
for _, v in ipairs(items) do
  out[#out + 1] = v
end
return out
