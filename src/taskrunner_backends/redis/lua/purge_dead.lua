-- Delete dead letters: the given ids, or all of them when none are given.
--
-- KEYS: 1 dead-letter stream, 2 dead letters by original id
-- ARGV: the dead-letter ids (optional)
-- Returns how many were deleted.
--
-- Each deleted letter's index entry goes with it (only if it still points at it).

local dead, dead_ids = KEYS[1], KEYS[2]
if #ARGV == 0 then
  local n = redis.call('XLEN', dead)
  redis.call('DEL', dead, dead_ids)
  return n
end
local n = 0
for _, id in ipairs(ARGV) do
  local r = redis.call('XRANGE', dead, id, id)
  if #r > 0 then
    local fields = r[1][2]
    for i = 1, #fields, 2 do
      if fields[i] == 'o' then
        if redis.call('HGET', dead_ids, fields[i + 1]) == id then
          redis.call('HDEL', dead_ids, fields[i + 1])
        end
        break
      end
    end
    n = n + redis.call('XDEL', dead, id)
  end
end
return n
