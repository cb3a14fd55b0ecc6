-- One consistent snapshot of the queue's counters.
--
-- KEYS: 1 stream, 2 dead-letter stream, 3 delayed zset, 4 parked stream, 5 origins (unused)
-- ARGV: 1 group, 2 how many of the oldest pending entries to inspect for idle time,
--       3 "counts" to return only the first five numbers (for len), 4 flow-control
--       prefix
-- Returns {lag or -1, stream length, pending, dead, delayed, server ms,
--          id of the oldest ready entry or "", longest idle ms among inspected or -1,
--          delayed messages already due, due time (ms) of the earliest of them or -1,
--          consumer count, then per consumer: name, pending, idle ms, inactive ms or -1,
--          then messages waiting for flow control's admission, and the ms part of the
--          oldest one's parked id (when it started to wait) or -1}
-- (with "counts", the first five, then the waiting count; delayed then includes the
-- due ones). Waiting messages are ready as far as callers are concerned.
-- Both end with the priority streams' share (see below): their ready count and their
-- pending count; the full snapshot then also the ms part of their oldest ready
-- entry's id or -1 and their longest idle ms among inspected or -1, and its consumers
-- include theirs (a name may then repeat: one per stream it reads).
--
-- Priorities: each priority above 0 in use (the hash `levels`) has its own stream and
-- group; its ready entries are its length minus its pending (bounded by its lag).
--
-- A released message whose delay is over stays in the delayed set until a receive
-- promotes it, but it is ready: the full snapshot counts it so, without moving it.

local stream, dead, delayed = KEYS[1], KEYS[2], KEYS[3]
local group, sample, counts_only = ARGV[1], ARGV[2], ARGV[3] == 'counts'
local waiting_key = ARGV[4] .. 'waiting'
-- The priorities above 0 in use: the fields of the hash `levels` (HGETALL: only
-- commands of the documented ACL).
local function levels_in(key)
  local flat, out = redis.call('HGETALL', key), {}
  for i = 1, #flat, 2 do
    out[#out + 1] = flat[i]
  end
  return out
end
local levels = levels_in(string.sub(dead, 1, -5) .. 'levels')

local function as_map(flat)
  local m = {}
  for i = 1, #flat, 2 do
    m[flat[i]] = flat[i + 1]
  end
  return m
end

-- A queue nobody has used yet (no stream) or that no worker has read (no group) is
-- reported as it is; reading never creates anything.
local info = nil
if redis.call('EXISTS', stream) == 1 then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local m = as_map(g)
    if m['name'] == group then
      info = m
    end
  end
end
local has_group = info ~= nil
if not has_group then
  info = {['lag'] = redis.call('XLEN', stream), ['pending'] = 0, ['last-delivered-id'] = '0-0'}
end

-- lag is nil when the server cannot compute it (tombstones after the group's cursor).
local lag = info['lag']
if not lag then
  lag = -1
end

-- The priority streams: {ready, pending, oldest ready ms or -1, longest idle or -1},
-- and their consumers' entries.
local extra = {0, 0, -1, -1}
local extra_consumers = {}
for _, level in ipairs(levels) do
  local s = stream .. ':' .. level
  local g = nil
  local groups = redis.pcall('XINFO', 'GROUPS', s)
  if type(groups) == 'table' and not groups.err then
    for _, entry in ipairs(groups) do
      local m = as_map(entry)
      if m['name'] == group then
        g = m
      end
    end
  end
  if g then
    local length, pending = redis.call('XLEN', s), tonumber(g['pending'])
    local unread = math.max(0, length - pending)
    if g['lag'] then
      unread = math.min(unread, tonumber(g['lag']))
    end
    extra[1] = extra[1] + unread
    extra[2] = extra[2] + pending
    if not counts_only then
      local head = redis.call('XRANGE', s, '(' .. g['last-delivered-id'], '+', 'COUNT', 1)
      if #head > 0 then
        local ms = tonumber(string.match(head[1][1], '^(%d+)-'))
        if extra[3] < 0 or ms < extra[3] then
          extra[3] = ms
        end
      end
      if pending > 0 then
        for _, p in ipairs(redis.call('XPENDING', s, group, '-', '+', sample)) do
          extra[4] = math.max(extra[4], tonumber(p[3]))
        end
      end
      for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', s, group)) do
        extra_consumers[#extra_consumers + 1] = c
      end
    end
  end
end

if counts_only then
  return {lag, redis.call('XLEN', stream), info['pending'], redis.call('XLEN', dead),
          redis.call('ZCARD', delayed), redis.call('ZCARD', waiting_key), extra[1], extra[2]}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local oldest_ready = ''
local first = redis.call('XRANGE', stream, '(' .. info['last-delivered-id'], '+', 'COUNT', 1)
if #first > 0 then
  oldest_ready = first[1][1]
end
local max_idle = -1
if tonumber(info['pending']) > 0 then
  for _, p in ipairs(redis.call('XPENDING', stream, group, '-', '+', sample)) do
    max_idle = math.max(max_idle, tonumber(p[3]))
  end
end

local due = redis.call('ZCOUNT', delayed, '-inf', now)
local first_due = -1
if due > 0 then
  first_due = tonumber(redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)[2])
end

local out = {
  lag,
  redis.call('XLEN', stream),
  info['pending'],
  redis.call('XLEN', dead),
  redis.call('ZCARD', delayed) - due,
  now,
  oldest_ready,
  max_idle,
  due,
  first_due,
}
local consumers = {}
if has_group then
  consumers = redis.call('XINFO', 'CONSUMERS', stream, group)
end
for _, c in ipairs(extra_consumers) do
  consumers[#consumers + 1] = c
end
out[#out + 1] = #consumers
for _, c in ipairs(consumers) do
  local m = as_map(c)
  out[#out + 1] = m['name']
  out[#out + 1] = m['pending']
  out[#out + 1] = m['idle']
  out[#out + 1] = m['inactive'] or -1
end
out[#out + 1] = redis.call('ZCARD', waiting_key)
local oldest = redis.call('ZRANGE', waiting_key, 0, 0)
out[#out + 1] = (#oldest > 0) and tonumber(string.match(oldest[1], '^(%d+)-')) or -1
for _, v in ipairs(extra) do
  out[#out + 1] = v
end
return out
