-- Promote due delayed messages before a receive reads new entries.
--
-- KEYS: 1 stream, 2 dead-letter stream (unused), 3 delayed zset, 4 parked stream,
--       5 origins hash, 6 doorbell stream, 7 moved hash, 8 uniques (unused),
--       9 dead letters by original id (unused)
-- ARGV: 1 group, 2 most delayed messages to promote, 3 flow-control prefix, then the
--       doorbell entries the previous blocking read of this receive got (acked and
--       deleted here, so a ring costs no round trip of its own)
-- Returns ms until the next delayed message is due, or -1; when the queue has flow
-- keys waiting (f:ring or f:rate exists), {that ms, 1 if a key may admit now else 0},
-- where the ms also counts down to the next rate-blocked key's time. The plain path
-- pays one EXISTS for it.
--
-- A due delayed message with a flow (field f) is not put on the stream: it starts to
-- wait (flow_lib.lua) under a new parked entry, so the parked id of every waiting
-- message is the time it started to wait (stats reads its age from it).
--
-- The receive sends this script and its XREADGROUP in one write, the script first, so
-- a message due now is readable by that same read. The read is not in the script: a
-- script's reply is built from Lua tables, and converting every leased entry into one
-- and back was a third of a receive's server time.

local stream, delayed, parked, origins = KEYS[1], KEYS[3], KEYS[4], KEYS[5]
local bell, moved = KEYS[6], KEYS[7]
local group, limit = ARGV[1], ARGV[2]
flow.prefix, flow.bell = ARGV[3], bell

if #ARGV > 3 then
  local rung = {}
  for i = 4, #ARGV do
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
      local new_id = redis.call('XADD', stream, '*', unpack(fields))
      local message_id, count = nil, nil
      for i = 1, #fields, 2 do
        if fields[i] == 'i' then
          message_id = fields[i + 1]
        elseif fields[i] == 'n' then
          count = fields[i + 1]
        end
      end
      if message_id and count then
        origin_pairs[#origin_pairs + 1] = new_id
        origin_pairs[#origin_pairs + 1] = message_id .. '/' .. count
      end
      if message_id then
        moved_pairs[#moved_pairs + 1] = message_id
        moved_pairs[#moved_pairs + 1] = 's' .. new_id
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
if redis.call('EXISTS', p .. 'ring', p .. 'rate') == 0 then
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
return {next_due, admissible}
