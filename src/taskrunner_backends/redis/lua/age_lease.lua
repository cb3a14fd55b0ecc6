-- Test hook: make a pending entry look idle for ARGV[3] ms, keeping owner and count.
--
-- KEYS: 1 stream
-- ARGV: 1 group, 2 entry id, 3 idle ms
-- Returns 1 when the entry was pending (and is now aged), 0 otherwise.

local stream, group, id, idle = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local p = redis.pcall('XPENDING', stream, group, id, id, 1)
if type(p) ~= 'table' or p.err or #p == 0 then
  return 0
end
local claimed = redis.call('XCLAIM', stream, group, p[1][2], 0, id, 'IDLE', idle, 'JUSTID')
return #claimed
