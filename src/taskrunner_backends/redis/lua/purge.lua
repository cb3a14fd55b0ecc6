-- Delete every ready, delayed and in-flight message of the queue.
--
-- KEYS: 1 stream, 2 dead-letter stream (kept), 3 delayed zset, 4 parked stream
-- ARGV: 1 group
-- Returns how many messages were deleted.
--
-- The stream key is trimmed, not deleted, so its last id survives and new entries
-- never reuse a purged id (a stale receipt could otherwise match a new message).
-- Recreating the group drops every PEL entry, so purged receipts report lost.

local stream, delayed, parked = KEYS[1], KEYS[3], KEYS[4]
local group = ARGV[1]
local n = redis.call('XLEN', stream) + redis.call('ZCARD', delayed)
redis.call('XTRIM', stream, 'MAXLEN', 0)
redis.pcall('XGROUP', 'DESTROY', stream, group)
redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
redis.call('DEL', delayed, parked)
return n
