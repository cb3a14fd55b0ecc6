-- Promote due delayed messages before a receive reads new entries.
--
-- KEYS: 1 stream, 2 dead-letter stream (unused), 3 delayed zset, 4 parked stream,
--       5 origins hash, 6 doorbell stream, 7 moved hash, 8 uniques (unused),
--       9 dead letters by original id (unused)
-- ARGV: 1 group, 2 most delayed messages to promote, 3 flow-control prefix,
--       4 the holder to lease to by priority ("" or absent: the caller reads the
--       priority-0 stream itself), 5 how many to lease, 6 the aging period in ms (0:
--       strict priorities), then the doorbell entries the previous blocking read of
--       this receive got (acked and deleted here, so a ring costs no round trip of its
--       own)
-- Returns ms until the next delayed message is due, or -1; when the queue has flow
-- keys waiting (f:ring or f:rate exists), {that ms, 1 if a key may admit now else 0},
-- where the ms also counts down to the next rate-blocked key's time. The plain path
-- pays one EXISTS for it.
--
-- A due delayed message with a flow (field f) is not put on the stream: it starts to
-- wait (flow_lib.lua) under a new parked entry, so the parked id of every waiting
-- message is the time it started to wait (stats reads its age from it).
--
-- Priorities: when the hash `levels` exists (a priority above 0 was used), the reply is
-- {ms, admissible, "<levels>", id, fields, priority, ...}: the levels joined by commas,
-- then, with a holder, the entries this script leased to it, best first, each with the
-- priority of the stream it is on. Best: the head
-- (oldest unread entry) of the level with the highest effective priority, its level
-- plus one per aging period its entry id's time lies before the server's TIME (capped
-- at 9); a tie goes to the higher level. The EXISTS of flow control's keys covers the
-- hash too, so a queue that never used a priority pays nothing more.
--
-- A due delayed message with a priority (field p) goes back to its own stream.
--
-- The receive sends this script and its XREADGROUP in one write, the script first, so
-- a message due now is readable by that same read. The read is not in the script: a
-- script's reply is built from Lua tables, and converting every leased entry into one
-- and back was a third of a receive's server time.

local stream, delayed, parked, origins = KEYS[1], KEYS[3], KEYS[4], KEYS[5]
local bell, moved = KEYS[6], KEYS[7]
local group, limit = ARGV[1], ARGV[2]
flow.prefix, flow.bell = ARGV[3], bell
local holder = ARGV[4] or ''

if #ARGV > 6 then
  local rung = {}
  for i = 7, #ARGV do
    rung[#rung + 1] = ARGV[i]
  end
  redis.call('XACK', bell, group, unpack(rung))
  redis.call('XDEL', bell, unpack(rung))
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, limit)
if #due > 0 then
  -- One command per batch for the removals and the maps, so a burst of messages due
  -- at once is promoted at two commands per message (read, add). Only commands the
  -- documented ACL grants (ZREM, not ZREMRANGEBYRANK).
  local origin_pairs, moved_pairs = {}, {}
  for _, parked_id in ipairs(due) do
    local r = redis.call('XRANGE', parked, parked_id, parked_id)
    local k = #r > 0 and flow_of(r[1][2])
    if k then
      local fields = r[1][2]
      local new_parked = redis.call('XADD', parked, '*', unpack(fields))
      for i = 1, #fields, 2 do
        if fields[i] == 'i' then
          moved_pairs[#moved_pairs + 1] = fields[i + 1]
          moved_pairs[#moved_pairs + 1] = 'p' .. new_parked
        end
      end
      flow_wait(k, new_parked)
    elseif #r > 0 then
      local fields = r[1][2]
      local message_id, count, level = nil, nil, nil
      for i = 1, #fields, 2 do
        if fields[i] == 'i' then
          message_id = fields[i + 1]
        elseif fields[i] == 'n' then
          count = fields[i + 1]
        elseif fields[i] == 'p' then
          level = fields[i + 1]
        end
      end
      local new_id = redis.call('XADD', level and (stream .. ':' .. level) or stream, '*',
        unpack(fields))
      if message_id and count then
        origin_pairs[#origin_pairs + 1] = new_id
        origin_pairs[#origin_pairs + 1] = message_id .. '/' .. count
      end
      if message_id then
        moved_pairs[#moved_pairs + 1] = message_id
        moved_pairs[#moved_pairs + 1] = (level and ('S' .. level) or 's') .. new_id
      end
    end
  end
  if #origin_pairs > 0 then
    redis.call('HSET', origins, unpack(origin_pairs))
  end
  if #moved_pairs > 0 then
    redis.call('HSET', moved, unpack(moved_pairs))
  end
  redis.call('XDEL', parked, unpack(due))
  redis.call('ZREM', delayed, unpack(due))
end

local next_due = -1
local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
if #first > 0 then
  next_due = math.max(0, tonumber(first[2]) - now)
end

local p = flow.prefix
local levels_key = string.sub(stream, 1, -7) .. 'levels'
if holder == '' and redis.call('EXISTS', p .. 'ring', p .. 'rate', levels_key) == 0 then
  return next_due
end
local admissible = redis.call('EXISTS', p .. 'ring')
local wake = flow_first_score(p .. 'rate')
if wake then
  local t2 = redis.call('TIME')
  local exact = tonumber(t2[1]) * 1000 + tonumber(t2[2]) / 1000
  if wake <= exact then
    admissible = 1
  else
    local ms = math.ceil(wake - exact)
    if next_due < 0 or ms < next_due then
      next_due = ms
    end
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
local used = levels_in(levels_key)
if holder == '' then
  if #used == 0 then
    return {next_due, admissible}
  end
  return {next_due, admissible, table.concat(used, ',')}
end

-- Lease by priority. Each level's candidates: its unread entries, oldest first (as
-- many as could be taken), read after the group's cursor.
local need, aging = tonumber(ARGV[5]), tonumber(ARGV[6])
local order = {}
for _, l in ipairs(used) do
  order[#order + 1] = tonumber(l)
end
table.sort(order, function(a, b) return a > b end)
order[#order + 1] = 0
local heads = {}
for _, level in ipairs(order) do
  local s = level == 0 and stream or (stream .. ':' .. level)
  local last = nil
  local groups = redis.pcall('XINFO', 'GROUPS', s)
  if type(groups) == 'table' and not groups.err then
    for _, g in ipairs(groups) do
      for i = 1, #g, 2 do
        if g[i] == 'name' and g[i + 1] == group then
          for j = 1, #g, 2 do
            if g[j] == 'last-delivered-id' then
              last = g[j + 1]
            end
          end
        end
      end
    end
    if last == nil then
      redis.call('XGROUP', 'CREATE', s, group, '0')
      last = '0-0'
    end
    local ids = {}
    for _, e in ipairs(redis.call('XRANGE', s, '(' .. last, '+', 'COUNT', need)) do
      ids[#ids + 1] = e[1]
    end
    if #ids > 0 then
      heads[#heads + 1] = {level = level, key = s, ids = ids, taken = 0}
    end
  end
end
local picks = {}
for _ = 1, need do
  local best, best_rank = nil, -1
  for _, h in ipairs(heads) do
    if h.taken < #h.ids then
      local rank = h.level
      if aging > 0 and rank < 9 then
        local ms = tonumber(string.match(h.ids[h.taken + 1], '^(%d+)-'))
        rank = math.min(9, rank + math.floor(math.max(0, now - ms) / aging))
      end
      -- Strictly greater: of equal ranks the higher level, met first, stays.
      if rank > best_rank then
        best, best_rank = h, rank
      end
    end
  end
  if best == nil then
    break
  end
  best.taken = best.taken + 1
  picks[#picks + 1] = best
end
-- One XREADGROUP per level leases exactly the entries ranked above (nothing else ran
-- in between); the reply lists them in the order they were picked.
for _, h in ipairs(heads) do
  h.read, h.next = {}, 1
  if h.taken > 0 then
    local r = redis.call('XREADGROUP', 'GROUP', group, holder, 'COUNT', h.taken,
      'STREAMS', h.key, '>')
    if r and r[1] then
      h.read = r[1][2]
    end
  end
end
local out = {next_due, admissible, table.concat(used, ',')}
for _, h in ipairs(picks) do
  local e = h.read[h.next]
  if e then
    h.next = h.next + 1
    out[#out + 1] = e[1]
    out[#out + 1] = e[2]
    out[#out + 1] = h.level
  end
end
return out
