-- Delete consumers that own no pending entries and were inactive long enough, or
-- (when names are given) the named ones that own no pending entries.
--
-- KEYS: 1 stream, 2 doorbell stream
-- ARGV: 1 group, 2 minimum inactivity in ms, then optional consumer names as callers
--       know them (without the "~<lease ms>" suffix the backend appends)
-- Returns the full names of the deleted consumers.
--
-- XGROUP DELCONSUMER drops the consumer's pending entries with it, which would make
-- them unclaimable; checking the pending count in the same script makes the check
-- and the delete atomic, so a consumer that owns anything is never deleted.
--
-- The doorbell's group has consumers of the same names. Its pending entries are
-- rings nobody will read again (a receive cancelled or crashed after its read): they
-- are acked and deleted, and such consumers go by the same rule, whatever they hold.
-- They are not reported (callers know only the queue's consumers).
--
-- Priorities: a consumer that leased a priority above 0 is also a consumer of that
-- priority's stream. It goes from every stream only if it owns nothing on any, and
-- its inactivity is its least over them.

local stream, bell, group, min_idle = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local named = nil
if #ARGV > 2 then
  named = {}
  for i = 3, #ARGV do
    named[ARGV[i]] = true
  end
end
local function fields(c)
  local m = {}
  for i = 1, #c, 2 do
    m[c[i]] = c[i + 1]
  end
  return m
end

local function chosen_by_rule(m)
  if named then
    local base = string.match(m['name'], '^(.*)~%d+$') or m['name']
    return named[base] ~= nil
  end
  -- 7.2+ reports `inactive` (since the last successful interaction, -1 if never);
  -- older servers only `idle`.
  local idle = m['inactive']
  if idle == nil or tonumber(idle) < 0 then
    idle = m['idle']
  end
  return tonumber(idle) >= min_idle
end

local rings = redis.pcall('XINFO', 'CONSUMERS', bell, group)
if not rings.err then
  for _, c in ipairs(rings) do
    local m = fields(c)
    if chosen_by_rule(m) then
      while true do
        local left = redis.call('XPENDING', bell, group, '-', '+', 100, m['name'])
        if #left == 0 then
          break
        end
        local ids = {}
        for _, p in ipairs(left) do
          ids[#ids + 1] = p[1]
        end
        redis.call('XACK', bell, group, unpack(ids))
        redis.call('XDEL', bell, unpack(ids))
      end
      redis.call('XGROUP', 'DELCONSUMER', bell, group, m['name'])
    end
  end
end

local streams = {stream}
local flat = redis.call('HGETALL', string.sub(stream, 1, -7) .. 'levels')
for i = 1, #flat, 2 do
  streams[#streams + 1] = stream .. ':' .. flat[i]
end
-- name -> {pending over every stream, least inactivity, streams it is on}
local seen, names = {}, {}
for _, s in ipairs(streams) do
  local consumers = redis.pcall('XINFO', 'CONSUMERS', s, group)
  if not consumers.err then
    for _, c in ipairs(consumers) do
      local m = fields(c)
      local idle = m['inactive']
      if idle == nil or tonumber(idle) < 0 then
        idle = m['idle']
      end
      local v = seen[m['name']]
      if v == nil then
        v = {pending = 0, name = m['name'], on = {}}
        seen[m['name']] = v
        names[#names + 1] = m['name']
      end
      v.pending = v.pending + tonumber(m['pending'])
      v.on[#v.on + 1] = s
      if v.idle == nil or tonumber(idle) < v.idle then
        v.idle = tonumber(idle)
      end
    end
  end
end
local removed = {}
for _, name in ipairs(names) do
  local v = seen[name]
  if chosen_by_rule({name = name, idle = v.idle}) and v.pending == 0 then
    for _, s in ipairs(v.on) do
      redis.call('XGROUP', 'DELCONSUMER', s, group, name)
    end
    removed[#removed + 1] = name
  end
end
return removed
