-- Delete consumers that own no pending entries and were inactive long enough, or
-- (when names are given) the named ones that own no pending entries.
--
-- KEYS: 1 stream
-- ARGV: 1 group, 2 minimum inactivity in ms, then optional consumer names as callers
--       know them (without the "~<lease ms>" suffix the backend appends)
-- Returns the full names of the deleted consumers.
--
-- XGROUP DELCONSUMER drops the consumer's pending entries with it, which would make
-- them unclaimable; checking the pending count in the same script makes the check
-- and the delete atomic, so a consumer that owns anything is never deleted.

local stream, group, min_idle = KEYS[1], ARGV[1], tonumber(ARGV[2])
local named = nil
if #ARGV > 2 then
  named = {}
  for i = 3, #ARGV do
    named[ARGV[i]] = true
  end
end
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
  local chosen
  if named then
    local base = string.match(m['name'], '^(.*)~%d+$') or m['name']
    chosen = named[base] ~= nil
  else
    -- 7.2+ reports `inactive` (since the last successful interaction, -1 if never);
    -- older servers only `idle`.
    local idle = m['inactive']
    if idle == nil or tonumber(idle) < 0 then
      idle = m['idle']
    end
    chosen = tonumber(idle) >= min_idle
  end
  if chosen and tonumber(m['pending']) == 0 then
    redis.call('XGROUP', 'DELCONSUMER', stream, group, m['name'])
    removed[#removed + 1] = m['name']
  end
end
return removed
