-- Delete dead letters: the given ids, or all of them when none are given.
--
-- KEYS: 1 dead-letter stream
-- ARGV: the dead-letter ids (optional)
-- Returns how many were deleted.

local dead = KEYS[1]
if #ARGV == 0 then
  local n = redis.call('XLEN', dead)
  redis.call('DEL', dead)
  return n
end
return redis.call('XDEL', dead, unpack(ARGV))
