-- Delete every ready, delayed and in-flight message of the queue, and free every
-- unique key they held.
--
-- KEYS: 1 stream, 2 dead-letter stream (kept), 3 delayed zset, 4 parked stream,
--       5 origins hash, 6 doorbell (kept), 7 moved hash, 8 uniques zset,
--       9 dead letters by original id (kept, as the dead letters are)
-- ARGV: 1 group, 2 unique-key prefix
-- Returns how many messages were deleted.
--
-- The stream key is trimmed, not deleted, so its last id survives and new entries
-- never reuse a purged id (a stale receipt could otherwise match a new message).
-- Recreating the group drops every PEL entry, so purged receipts report lost.

local stream, delayed, parked, origins = KEYS[1], KEYS[3], KEYS[4], KEYS[5]
local moved, uniques = KEYS[7], KEYS[8]
local group, uprefix = ARGV[1], ARGV[2]
local n = redis.call('XLEN', stream) + redis.call('ZCARD', delayed)
local held = redis.call('ZRANGE', uniques, 0, -1)
for i = 1, #held, 500 do
  local batch = {}
  for j = i, math.min(i + 499, #held) do
    batch[#batch + 1] = uprefix .. held[j]
  end
  redis.call('DEL', unpack(batch))
end
redis.call('DEL', delayed, parked, origins, moved, uniques)
if redis.call('EXISTS', stream) == 0 then
  -- Nothing was ever added: create nothing.
  return n
end
redis.call('XTRIM', stream, 'MAXLEN', 0)
redis.pcall('XGROUP', 'DESTROY', stream, group)
redis.call('XGROUP', 'CREATE', stream, group, '0')
return n
