-- Move dead letters back onto the queue as new messages.
--
-- KEYS: 1 stream, 2 dead-letter stream, 3 dead letters by original id
-- ARGV: 1 batch size and 2 the last dead-letter id to take, used when no ids are
--       given; then the dead-letter ids (optional)
-- Returns the new message ids, one per dead letter moved; unknown ids are skipped.
--
-- XADD and XDEL of each dead letter happen in one script: it is neither lost (both
-- or neither) nor duplicated (a second retry of the same id finds nothing). The
-- message comes back under a new id, so its original id no longer names anything:
-- its index entry goes (only if it still points at this dead letter).

local stream, dead, dead_ids = KEYS[1], KEYS[2], KEYS[3]
local ids = {}
if #ARGV > 2 then
  for i = 3, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
else
  for _, e in ipairs(redis.call('XRANGE', dead, '-', ARGV[2], 'COUNT', ARGV[1])) do
    ids[#ids + 1] = e[1]
  end
end

local out = {}
for _, id in ipairs(ids) do
  local r = redis.call('XRANGE', dead, id, id)
  if #r > 0 then
    local body, original = '', nil
    local fields = r[1][2]
    for i = 1, #fields, 2 do
      if fields[i] == 'b' then
        body = fields[i + 1]
      elseif fields[i] == 'o' then
        original = fields[i + 1]
      end
    end
    out[#out + 1] = redis.call('XADD', stream, '*', 'b', body)
    redis.call('XDEL', dead, id)
    if original and redis.call('HGET', dead_ids, original) == id then
      redis.call('HDEL', dead_ids, original)
    end
  end
end
return out
