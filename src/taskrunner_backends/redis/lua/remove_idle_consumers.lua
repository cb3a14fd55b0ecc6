-- Delete consumers that own no pending entries and were inactive long enough.
--
-- KEYS: 1 stream
-- ARGV: 1 group, 2 minimum inactivity in ms
-- Returns the names of the deleted consumers.
--
-- XGROUP DELCONSUMER drops the consumer's pending entries with it, which would make
-- them unclaimable; checking the pending count in the same script makes the check
-- and the delete atomic, so a consumer that owns anything is never deleted.

local stream, group, min_idle = KEYS[1], ARGV[1], tonumber(ARGV[2])
local consumers = redis.pcall('XINFO', 'CONSUMERS', stream, group)
if consumers.err then
  return {}
end
local removed = {}
for _, c in ipairs(consumers) do
  local m = {}
  for i = 1, #c, 2 do
    m[c[i]] = c[i + 1]
  end
  -- 7.2+ reports `inactive` (since the last successful interaction, -1 if never);
  -- older servers only `idle`.
  local idle = m['inactive']
  if idle == nil or tonumber(idle) < 0 then
    idle = m['idle']
  end
  if tonumber(m['pending']) == 0 and tonumber(idle) >= min_idle then
    redis.call('XGROUP', 'DELCONSUMER', stream, group, m['name'])
    removed[#removed + 1] = m['name']
  end
end
return removed
