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
--
-- A released message whose delay is over stays in the delayed set until a receive
-- promotes it, but it is ready: the full snapshot counts it so, without moving it.

local stream, dead, delayed = KEYS[1], KEYS[2], KEYS[3]
local group, sample, counts_only = ARGV[1], ARGV[2], ARGV[3] == 'counts'
local waiting_key = ARGV[4] .. 'waiting'

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
if counts_only then
  return {lag, redis.call('XLEN', stream), info['pending'], redis.call('XLEN', dead),
          redis.call('ZCARD', delayed), redis.call('ZCARD', waiting_key)}
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
return out
