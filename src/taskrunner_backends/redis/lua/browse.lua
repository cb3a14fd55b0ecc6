-- A page of the waiting or in-flight messages, read-only (nothing is written).
--
-- KEYS: 1 stream, 2 parked stream
-- ARGV: 1 group, 2 "waiting" | "in_flight", 3 cursor (a stream entry id, or "w<number>"
--       for a message waiting for flow control; "" = from the first), 4 limit (count,
--       checked by the caller), 5 body bytes ("" = whole bodies; else the body field
--       'b' is cut to its first N bytes here, on the server), 6 flow-control prefix,
--       7 "1" to leave out the messages waiting for flow control (a priority's own
--       stream as KEYS[1]: the caller lists them with priority 0)
-- Returns 6 values per entry, in entry-id order: entry id, its field list (false when
--       the entry is gone), then for in_flight: group consumer, idle ms, PEL count
--       (false for waiting), then the whole length of the 'b' field when it was cut
--       (false when not).
--
-- Acked entries are deleted, so the stream holds only in-flight entries (up to the
-- group's last-delivered id, each one in the PEL) and waiting ones (after it). A page
-- of waiting ones is one XRANGE from the later of the cursor and that id; a page in
-- flight one XPENDING from the cursor plus one XRANGE per entry for its fields.
-- Neither touches an idle time, an owner or a delivery count.
--
-- Waiting for flow control's admission counts as waiting: those messages are listed
-- after the stream's waiting entries, in the order they started to wait, each with the
-- cursor "w<number>" (its number in f:waiting): one ZRANGEBYSCORE from the cursor's
-- number plus one XRANGE of the parked stream per message.

local stream = KEYS[1]
local group, state, after, limit = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local cut = tonumber(ARGV[5])
local parked, waiting = KEYS[2], ARGV[6] .. 'waiting'

local out = {}
local flow_after = string.match(after, '^w(%d+)$')
local has_stream = redis.call('EXISTS', stream) == 1
if not has_stream and state ~= 'waiting' then
  return out
end

local last = nil
for _, g in ipairs(has_stream and redis.call('XINFO', 'GROUPS', stream) or {}) do
  for i = 1, #g, 2 do
    if g[i] == 'name' and g[i + 1] == group then
      for j = 1, #g, 2 do
        if g[j] == 'last-delivered-id' then
          last = g[j + 1]
        end
      end
    end
  end
end

-- Stream ids compared part by part as decimal text (no float rounding of 64-bit parts).
local function less(a, b)
  local am, as = string.match(a, '^(%d+)%-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)%-(%d+)$')
  local function lt(x, y)
    if #x ~= #y then
      return #x < #y
    end
    return x < y
  end
  if am ~= bm then
    return lt(am, bm)
  end
  return lt(as, bs)
end

-- Only the body is cut: the other fields of a message are a few bytes each (its id,
-- a delivery count), and a cut one would no longer parse.
local function emit(id, fields, consumer, idle, count)
  local size = false
  if fields and cut then
    for i = 1, #fields - 1, 2 do
      if fields[i] == 'b' and #fields[i + 1] > cut then
        size = #fields[i + 1]
        fields[i + 1] = string.sub(fields[i + 1], 1, cut)
      end
    end
  end
  local n = #out
  out[n + 1] = id
  out[n + 2] = fields or false
  out[n + 3] = consumer or false
  out[n + 4] = idle or false
  out[n + 5] = count or false
  out[n + 6] = size
end

-- The messages waiting for admission after number `from`, as many as `count`.
local function flow_page(from, count)
  if count <= 0 or ARGV[7] == '1' then
    return
  end
  local line = redis.call('ZRANGEBYSCORE', waiting, '(' .. from, '+inf', 'WITHSCORES',
    'LIMIT', 0, count)
  for i = 1, #line, 2 do
    local r = redis.call('XRANGE', parked, line[i], line[i])
    if #r > 0 then
      emit('w' .. line[i + 1], r[1][2])
    end
  end
end

if state == 'waiting' then
  if flow_after then
    -- The stream's waiting entries came before: only the flow part is left.
    flow_page(flow_after, limit)
    return out
  end
  local listed = 0
  if has_stream then
    -- No group yet: nothing was delivered, every entry waits.
    local start = last or '0-0'
    if after ~= '' and less(start, after) then
      start = after
    end
    for _, e in ipairs(redis.call('XRANGE', stream, '(' .. start, '+', 'COUNT', limit)) do
      emit(e[1], e[2])
      listed = listed + 1
    end
  end
  flow_page(0, limit - listed)
  return out
end

if last == nil or flow_after then
  return out
end
local from = '-'
if after ~= '' then
  from = '(' .. after
end
for _, p in ipairs(redis.call('XPENDING', stream, group, from, '+', limit)) do
  local r = redis.call('XRANGE', stream, p[1], p[1])
  local fields = false
  if #r > 0 then
    fields = r[1][2]
  end
  emit(p[1], fields, p[2], p[3], p[4])
end
return out
