-- Take over lapsed leases with XAUTOCLAIM, following its cursor.
--
-- KEYS: 1 stream, 2 dead-letter stream
-- ARGV: 1 group, 2 consumer, 3 min idle ms, 4 count, 5 cursor, 6 PEL entries to scan at most
-- Returns {next cursor, payloads found deleted, id, delivery count, fields, ...}
--
-- XAUTOCLAIM inspects at most COUNT x 10 PEL entries per call, so one call may find
-- nothing even though lapsed entries sit behind live ones; loop within the budget and
-- hand the cursor back so the next call continues where this one stopped.

local stream, dead = KEYS[1], KEYS[2]
local group, consumer, min_idle = ARGV[1], ARGV[2], ARGV[3]
local need, cursor, budget = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local GONE = 'payload removed from the stream while pending'

local items = {}
local deleted = 0
local now = nil
repeat
  local asked = need
  local r = redis.call('XAUTOCLAIM', stream, group, consumer, min_idle, cursor, 'COUNT', asked)
  cursor = r[1]
  for _, entry in ipairs(r[2]) do
    if entry and entry[1] then
      local p = redis.call('XPENDING', stream, group, entry[1], entry[1], 1)
      items[#items + 1] = entry[1]
      items[#items + 1] = p[1] and p[1][4] or 0
      items[#items + 1] = entry[2]
      need = need - 1
    end
  end
  -- 7.0+: ids whose payload no longer exists were dropped from the PEL by XAUTOCLAIM;
  -- they cannot be delivered, so they are recorded as dead letters.
  if r[3] then
    for _, id in ipairs(r[3]) do
      now = now or (function()
        local t = redis.call('TIME')
        return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end)()
      redis.call('XADD', dead, '*', 'b', '', 'r', GONE, 'o', id, 'c', 0, 't', now)
      deleted = deleted + 1
    end
  end
  budget = budget - 10 * asked
until need <= 0 or budget <= 0 or cursor == '0-0'

local out = {cursor, deleted}
for _, v in ipairs(items) do
  out[#out + 1] = v
end
return out
