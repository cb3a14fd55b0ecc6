-- Delete every ready, delayed and in-flight message of the queue.
--
-- KEYS: 1 stream, 2 dead-letter stream (kept), 3 delayed zset, 4 parked stream,
--       5 origins hash
-- ARGV: 1 group
-- Returns how many messages were deleted.
--
-- The stream key is trimmed, not deleted, so its last id survives and new entries
-- never reuse a purged id (a stale receipt could otherwise match a new message).
-- Recreating the group drops every PEL entry, so purged receipts report lost.

local stream, delayed, parked, origins = KEYS[1], KEYS[3], KEYS[4], KEYS[5]
local group = ARGV[1]
local n = redis.call('XLEN', stream) + redis.call('ZCARD', delayed)
redis.call('DEL', delayed, parked, origins)
if redis.call('EXISTS', stream) == 0 then
  -- Nothing was ever added: create nothing.
  return n
end
redis.call('XTRIM', stream, 'MAXLEN', 0)
redis.pcall('XGROUP', 'DESTROY', stream, group)
redis.call('XGROUP', 'CREATE', stream, group, '0')
return n
