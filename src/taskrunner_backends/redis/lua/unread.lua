-- Give back entries a receive just read from the priority-0 stream, as never delivered.
--
-- KEYS: 1 stream
-- ARGV: 1 group, 2 the holder that read them, then their ids, in read order
-- Returns 1 when they are unread again, 0 when they stay leased (someone read past
-- them, or one is no longer the holder's first delivery).
--
-- A receive that finds priorities in use only after its plain read (the hash `levels`
-- appeared since the handle last looked) must not keep priority-0 entries that higher
-- ones should have preceded. One read takes consecutive entries after the group's
-- cursor; when the cursor is still at the last of them, XACK takes them out of the PEL
-- and XGROUP SETID puts the cursor just before the first, so the next read by priority
-- sees them where they were, their delivery not counted.

local stream, group, holder = KEYS[1], ARGV[1], ARGV[2]
local first, last = ARGV[3], ARGV[#ARGV]
local cursor = nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local m = {}
  for i = 1, #g, 2 do
    m[g[i]] = g[i + 1]
  end
  if m['name'] == group then
    cursor = m['last-delivered-id']
  end
end
if cursor ~= last then
  return 0
end
local ids = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', stream, group, ARGV[i], ARGV[i], 1)
  if #p == 0 or p[1][2] ~= holder or tonumber(p[1][4]) ~= 1 then
    return 0
  end
  ids[#ids + 1] = ARGV[i]
end
local ms, seq = string.match(first, '^(%d+)-(%d+)$')
local before
if tonumber(seq) > 0 then
  before = ms .. '-' .. string.format('%d', tonumber(seq) - 1)
elseif tonumber(ms) > 0 then
  before = string.format('%d', tonumber(ms) - 1) .. '-18446744073709551615'
else
  before = '0-0'
end
redis.call('XACK', stream, group, unpack(ids))
redis.call('XGROUP', 'SETID', stream, group, before)
return 1
