-- Clear a queue, in one step: 'purge' deletes every ready, delayed and in-flight
-- message and frees every unique key they held; 'delete' deletes every key of the
-- queue, the held unique keys and the stored results included.
--
-- KEYS: purge: `QueueKeys.scheduling`: 1 stream, 2 dead-letter stream (kept),
--       3 delayed zset, 4 parked stream, 5 origins hash, 6 doorbell (kept), 7 moved
--       hash, 8 uniques zset, 9 dead letters by original id (kept, as the dead
--       letters are); delete: `QueueKeys.every_key`, which starts with the same nine
--       (KEYS[13] is `results`)
-- ARGV: 1 'purge' or 'delete', 2 group, 3 unique-key prefix, 4 result-key prefix
--       (delete only; "" for purge), 5 flow-control prefix
-- Returns: purge: how many messages were deleted; delete: {last, now}, the largest
--   millisecond part of any id the stream or the dead-letter stream handed out (-1:
--   none) and the server's clock (ms). The caller waits until the clock is past
--   `last`: the streams start their ids afresh, and an add within that millisecond
--   would get an id handed out before.
--
-- Purge trims the stream instead of deleting it, so its last id survives and new
-- entries never reuse a purged id (a stale receipt could otherwise match a new
-- message). Recreating the group drops every PEL entry, so purged receipts report lost.
-- Both clear every flow-control key: waiting messages (counted by purge), slots,
-- turns and rate times; f:turn names every key that has had waiting messages (and
-- so every f:q:<key> and f:h:<key>).
--
-- Priorities: the stream of each priority in the hash `levels` is purged as the stream
-- is (trimmed, its group recreated; the set stays) and deleted with the queue.

local stream, dead, delayed, parked, origins = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local moved, uniques = KEYS[7], KEYS[8]
local mode, group, uprefix = ARGV[1], ARGV[2], ARGV[3]
local fprefix = ARGV[5]
local levels_key = string.sub(stream, 1, -7) .. 'levels'
local level_streams = {}
-- The priorities above 0 in use: the fields of the hash `levels` (HGETALL: only
-- commands of the documented ACL).
local function levels_in(key)
  local flat, out = redis.call('HGETALL', key), {}
  for i = 1, #flat, 2 do
    out[#out + 1] = flat[i]
  end
  return out
end
for _, level in ipairs(levels_in(levels_key)) do
  level_streams[#level_streams + 1] = stream .. ':' .. level
end

local function clear_flow()
  -- HGETALL, not HKEYS: only commands of the documented ACL.
  local turns = redis.call('HGETALL', fprefix .. 'turn')
  for i = 1, #turns, 1000 do
    local batch = {}
    for j = i, math.min(i + 999, #turns), 2 do
      batch[#batch + 1] = fprefix .. 'q:' .. turns[j]
      batch[#batch + 1] = fprefix .. 'h:' .. turns[j]
    end
    redis.call('DEL', unpack(batch))
  end
  redis.call('DEL', fprefix .. 'seq', fprefix .. 'waiting', fprefix .. 'ring',
    fprefix .. 'slot', fprefix .. 'rate', fprefix .. 'turn',
    fprefix .. 'tat', fprefix .. 'adm', fprefix .. 'route')
end

local function delete_indexed(index, prefix)
  local held = redis.call('ZRANGE', index, 0, -1)
  for i = 1, #held, 500 do
    local batch = {}
    for j = i, math.min(i + 499, #held) do
      batch[#batch + 1] = prefix .. held[j]
    end
    redis.call('DEL', unpack(batch))
  end
end

local function last_ms(key)
  if redis.call('EXISTS', key) == 0 then
    return -1
  end
  local info = redis.call('XINFO', 'STREAM', key)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      return tonumber(string.match(info[i + 1], '^(%d+)-'))
    end
  end
  return -1
end

if mode == 'delete' then
  local last = math.max(last_ms(stream), last_ms(dead))
  for _, s in ipairs(level_streams) do
    last = math.max(last, last_ms(s))
  end
  delete_indexed(uniques, uprefix)
  delete_indexed(KEYS[13], ARGV[4])
  clear_flow()
  redis.call('DEL', unpack(KEYS))
  redis.call('DEL', levels_key, unpack(level_streams))
  local t = redis.call('TIME')
  return {last, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
end

local n = redis.call('XLEN', stream) + redis.call('ZCARD', delayed)
  + redis.call('ZCARD', fprefix .. 'waiting')
for _, s in ipairs(level_streams) do
  n = n + redis.call('XLEN', s)
  if redis.call('EXISTS', s) == 1 then
    redis.call('XTRIM', s, 'MAXLEN', 0)
    redis.pcall('XGROUP', 'DESTROY', s, group)
    redis.call('XGROUP', 'CREATE', s, group, '0')
  end
end
delete_indexed(uniques, uprefix)
clear_flow()
redis.call('DEL', delayed, parked, origins, moved, uniques)
if redis.call('EXISTS', stream) == 0 then
  -- Nothing was ever added: create nothing.
  return n
end
redis.call('XTRIM', stream, 'MAXLEN', 0)
redis.pcall('XGROUP', 'DESTROY', stream, group)
redis.call('XGROUP', 'CREATE', stream, group, '0')
return n
