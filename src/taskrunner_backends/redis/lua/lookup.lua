-- The state of messages by id, read from the queue's own records (nothing written).
--
-- KEYS: 1 stream, 2 dead-letter stream, 3 delayed zset, 4 parked stream,
--       5 moved hash, 6 dead letters by original id
-- ARGV: 1 group, 2 flow-control prefix, then the message ids (stream-id format,
--       checked by the caller)
-- Returns 13 values per id: state ("ready" | "delayed" | "running" | "dead" | false),
--       delivery count, body, consumer (running), idle ms (running),
--       due ms (delayed), reason (dead), dead-lettered ms (dead), then for a message
--       waiting for flow control's admission: its flow key, why it waits ("slot" |
--       "rate" | "turn"), the ids holding the key's slots (slot), the server ms at
--       which its rate next allows one, as text (rate), and its rate key (rate)
--
-- Where a message is: its own stream entry until it is first released; after a
-- release or a delayed add, the entry `moved` names (s<stream id> or p<parked id>, or
-- S<priority><entry id> for an entry of a priority's own stream, any priority above 0);
-- after dead-lettering, the dead letter `dead_ids` names. Its delivery count is the
-- entry's base (field n) plus the PEL's count while it is leased. A message waiting for
-- flow control's admission is parked but in no delayed set: it is ready, and why it
-- waits is judged by its own flow as an admission would judge it now.

local stream, dead, delayed, parked, moved, dead_ids =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local group = ARGV[1]
local fprefix = ARGV[2]
local waiting = fprefix .. 'waiting'
-- As admit.lua's slack on GCRA's comparison (ms).
local EPSILON = 1e-6

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function entry(key, id)
  local r = redis.call('XRANGE', key, id, id)
  if #r == 0 then
    return nil
  end
  local f = {}
  local fields = r[1][2]
  for i = 1, #fields, 2 do
    f[fields[i]] = fields[i + 1]
  end
  return f
end

local function pending(id, key)
  local p = redis.pcall('XPENDING', key or stream, group, id, id, 1)
  if type(p) ~= 'table' or p.err or #p == 0 then
    return nil
  end
  return p[1]
end

local out = {}
local function emit(state, count, body, consumer, idle, due, reason, at, wait)
  local n = #out
  out[n + 1] = state
  out[n + 2] = count
  out[n + 3] = body or false
  out[n + 4] = consumer or false
  out[n + 5] = idle or false
  out[n + 6] = due or false
  out[n + 7] = reason or false
  out[n + 8] = at or false
  wait = wait or {}
  for j = 1, 5 do
    out[n + 8 + j] = wait[j] or false
  end
end

-- Why a waiting message of flow fields `f` is not admitted: {key, reason, holders,
-- until ms, rate key}.
local function why(f)
  local k = f['f']
  if f['fc'] then
    local held = redis.call('HGETALL', fprefix .. 'h:' .. k)
    if #held / 2 >= tonumber(f['fc']) then
      local ids = {}
      for j = 1, #held, 2 do
        ids[#ids + 1] = held[j]
      end
      table.sort(ids)
      return {k, 'slot', ids}
    end
  end
  if f['fr'] then
    local rk = f['fk'] or k
    local tat = redis.call('ZSCORE', fprefix .. 'tat', rk)
    if tat then
      local allowed = tonumber(tat) - (tonumber(f['fb'] or '1') - 1) * 1000 / tonumber(f['fr'])
      local t2 = redis.call('TIME')
      if allowed > tonumber(t2[1]) * 1000 + tonumber(t2[2]) / 1000 + EPSILON then
        return {k, 'rate', false, string.format('%.3f', allowed), rk}
      end
    end
  end
  return {k, 'turn'}
end

-- A stream entry: running while it is pending, ready otherwise.
local function on_stream(id, f, key)
  local base = tonumber(f['n'] or '0') or 0
  local p = pending(id, key)
  if p then
    emit('running', base + tonumber(p[4]), f['b'], p[2], tonumber(p[3]))
  else
    emit('ready', base, f['b'])
  end
end

for i = 3, #ARGV do
  local id = ARGV[i]
  local found = false
  local loc = redis.call('HGET', moved, id)
  if loc then
    local kind, at = string.sub(loc, 1, 1), string.sub(loc, 2)
    if kind == 's' or kind == 'S' then
      local key = stream
      if kind == 'S' then
        key, at = stream .. ':' .. string.sub(at, 1, 1), string.sub(at, 2)
      end
      local f = entry(key, at)
      if f then
        on_stream(at, f, key)
        found = true
      end
    elseif kind == 'p' then
      local f = entry(parked, at)
      local due = redis.call('ZSCORE', delayed, at)
      if f and due then
        local base = tonumber(f['n'] or '0') or 0
        due = tonumber(due)
        if due > now then
          emit('delayed', base, f['b'], nil, nil, due)
        else
          -- Due: the next receive promotes it before it reads.
          emit('ready', base, f['b'])
        end
        found = true
      elseif f and redis.call('ZSCORE', waiting, at) then
        emit('ready', tonumber(f['n'] or '0') or 0, f['b'], nil, nil, nil, nil, nil, why(f))
        found = true
      end
    end
  else
    local f = entry(stream, id)
    -- A re-added entry asked for by its entry id is not a message id (field i is).
    if f and (f['i'] == nil or f['i'] == id) then
      on_stream(id, f)
      found = true
    end
  end
  if not found then
    local dead_id = redis.call('HGET', dead_ids, id)
    local f = dead_id and entry(dead, dead_id)
    if f and f['o'] == id then
      emit('dead', tonumber(f['c'] or '0') or 0, f['b'], nil, nil, nil, f['r'] or '',
        tonumber(f['t'] or '0') or 0)
    else
      emit(false, 0)
    end
  end
end
return out
