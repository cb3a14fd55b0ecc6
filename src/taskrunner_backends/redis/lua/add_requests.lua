-- Add messages with options: delayed (due time on the server's clock) and unique.
--
-- KEYS: 1 stream, 2 dead (unused), 3 delayed zset, 4 parked stream, 5 origins (unused),
--       6 doorbell stream, 7 moved hash, 8 uniques zset, 9 dead ids (unused)
-- ARGV: 1 group, 2 unique-key prefix, 3 relay-record prefix, 4 relay-record ms,
--       5 flow-control prefix, then 7 per request: mode ("r" ready, "d" delay in ms,
--       "a" due at Unix seconds as text; followed by the priority digit 1-9 when it
--       is above 0), value, unique key ("" none), unique ms (""
--       none, "0" not held), body, flow ("" none, else key, concurrency, rate, burst
--       and rate key joined by NUL, "" for an absent one), relay id ("" none)
-- Returns {message id, 1 added | 0 held by that message, ...}, one pair per request.
--
-- A relay id (an outbox row's id) makes the request idempotent: its outcome (the
-- message id added, or the unique key's holder) is recorded under prefix .. id for
-- the record's ms, and a request whose relay id is recorded adds nothing and returns
-- the recorded id with 0. A relay that wrote a row and died before deleting it can so
-- send the row again without a second message.
--
-- Each request's unique check and add run in this one script, so no other client can
-- take the key in between. Ready messages are plain stream entries (their id is the
-- message id). A delayed message waits in the parked stream under an id reserved from
-- the queue stream's own sequence (XSETID moves the stream's last id past it, so no
-- later XADD can produce it): delayed and plain message ids never collide. Its parked
-- entry carries that id (i) and delivery count 0 (n), as released messages do, and
-- `moved` maps the id to the parked entry so cancel can find it.
--
-- A message of priority p above 0 goes to its own stream (stream:p, its group created
-- with it and p recorded in the hash `levels`) under a reserved id like a delayed one:
-- fields i, n 0 and p, `moved` naming "S<p><entry id>" and `origins` the entry. A
-- delayed one is parked with field p, which its promotion reads. Each one added rings
-- the doorbell: blocked receives read only the priority-0 stream.
--
-- A message with a flow is parked the same way under a reserved id, with its flow in
-- its fields (f key, fc concurrency, fr rate, fb burst, fk rate key), and waits
-- (flow_lib.lua) from its due time: at once when it has no delay, else when the
-- receive that promotes it finds it due.

local stream, delayed, parked, origins = KEYS[1], KEYS[3], KEYS[4], KEYS[5]
local bell, moved, uniques = KEYS[6], KEYS[7], KEYS[8]
local group, uprefix, rprefix, rms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
flow.prefix, flow.bell = ARGV[5], bell
local MAX_MS = 4503599627370496

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The stream's last generated id, as numbers; nil until first needed.
local last_ms, last_seq = nil, nil
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function reserve()
  if last_ms == nil then
    if redis.call('EXISTS', stream) == 0 then
      -- XSETID needs the stream; the group is created at 0 exactly as a receive would.
      redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
    end
    local info = redis.call('XINFO', 'STREAM', stream)
    for i = 1, #info, 2 do
      if info[i] == 'last-generated-id' then
        last_ms, last_seq = parse(info[i + 1])
      end
    end
  end
  if now > last_ms then
    last_ms, last_seq = now, 0
  else
    last_seq = last_seq + 1
  end
  local id = string.format('%d-%d', last_ms, last_seq)
  redis.call('XSETID', stream, id)
  return id
end

-- The levels that have a stream and group, as this script found or made them.
local made = {}
local function level_stream(level)
  local s = stream .. ':' .. level
  if not made[level] then
    local levels = string.sub(stream, 1, -7) .. 'levels'
    if redis.call('HSET', levels, level, '1') == 1 or redis.call('EXISTS', s) == 0 then
      local r = redis.pcall('XGROUP', 'CREATE', s, group, '0', 'MKSTREAM')
      if type(r) == 'table' and r.err and not string.find(r.err, 'BUSYGROUP', 1, true) then
        error(r.err)
      end
    end
    made[level] = true
  end
  return s
end
local prio_rings = 0

local pruned = false
local earliest = false   -- the earliest due time parked before this script, when read
local ring = false
local out = {}
-- The fields a flow spec adds to its message, and its key.
local function flow_fields(spec, fields)
  local parts = {}
  local start = 1
  while true do
    local stop = string.find(spec, '\0', start, true)
    if not stop then
      parts[#parts + 1] = string.sub(spec, start)
      break
    end
    parts[#parts + 1] = string.sub(spec, start, stop - 1)
    start = stop + 1
  end
  local names = {'f', 'fc', 'fr', 'fb', 'fk'}
  for j = 1, 5 do
    if parts[j] and parts[j] ~= '' then
      fields[#fields + 1] = names[j]
      fields[#fields + 1] = parts[j]
    end
  end
  return parts[1]
end

for i = 6, #ARGV, 7 do
  local mode, value, ukey, ums, body = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local level = nil
  if #mode > 1 then
    level = string.sub(mode, 2)
    mode = string.sub(mode, 1, 1)
  end
  local spec, relay = ARGV[i + 5], ARGV[i + 6]
  local holder = nil
  local relayed = false
  if relay ~= '' then
    holder = redis.call('GET', rprefix .. relay)
    relayed = holder ~= false
  end
  if ukey ~= '' and not relayed then
    if not pruned then
      -- Index members of keys that expired on their own; keeps `uniques` bounded.
      redis.call('ZREMRANGEBYSCORE', uniques, '-inf', now)
      pruned = true
    end
    holder = redis.call('GET', uprefix .. ukey)
  end
  if holder then
    if relay ~= '' and not relayed then
      redis.call('SET', rprefix .. relay, holder, 'PX', rms)
    end
    out[#out + 1] = holder
    out[#out + 1] = 0
  else
    local due = now
    if mode == 'd' then
      due = now + tonumber(value)
    elseif mode == 'a' then
      due = math.min(MAX_MS, math.ceil(tonumber(value) * 1000))
    end
    local fields = {'b', body}
    if ukey ~= '' then
      fields[3] = 'u'
      fields[4] = ukey
    end
    local id
    if level and due <= now then
      local s = level_stream(level)
      id = reserve()
      fields[#fields + 1] = 'i'
      fields[#fields + 1] = id
      fields[#fields + 1] = 'n'
      fields[#fields + 1] = '0'
      fields[#fields + 1] = 'p'
      fields[#fields + 1] = level
      local entry = redis.call('XADD', s, '*', unpack(fields))
      redis.call('HSET', origins, entry, id .. '/0')
      redis.call('HSET', moved, id, 'S' .. level .. entry)
      prio_rings = prio_rings + 1
    elseif due <= now and spec == '' then
      id = redis.call('XADD', stream, '*', unpack(fields))
      if last_ms ~= nil then
        last_ms, last_seq = parse(id)
      end
    elseif due <= now then
      id = reserve()
      fields[#fields + 1] = 'i'
      fields[#fields + 1] = id
      fields[#fields + 1] = 'n'
      fields[#fields + 1] = '0'
      local k = flow_fields(spec, fields)
      local parked_id = redis.call('XADD', parked, '*', unpack(fields))
      redis.call('HSET', moved, id, 'p' .. parked_id)
      flow_wait(k, parked_id)
    else
      id = reserve()
      fields[#fields + 1] = 'i'
      fields[#fields + 1] = id
      fields[#fields + 1] = 'n'
      fields[#fields + 1] = '0'
      if spec ~= '' then
        flow_fields(spec, fields)
      end
      if level then
        level_stream(level)
        fields[#fields + 1] = 'p'
        fields[#fields + 1] = level
      end
      if earliest == false then
        local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
        earliest = (#first > 0) and tonumber(first[2]) or nil
      end
      if earliest == nil or due < earliest then
        ring = true
        earliest = due
      end
      local parked_id = redis.call('XADD', parked, '*', unpack(fields))
      redis.call('ZADD', delayed, due, parked_id)
      redis.call('HSET', moved, id, 'p' .. parked_id)
    end
    if ukey ~= '' and ums ~= '0' then
      if ums == '' then
        redis.call('SET', uprefix .. ukey, id)
        redis.call('ZADD', uniques, '+inf', ukey)
      else
        redis.call('SET', uprefix .. ukey, id, 'PX', ums)
        redis.call('ZADD', uniques, now + tonumber(ums), ukey)
      end
    end
    if relay ~= '' then
      redis.call('SET', rprefix .. relay, id, 'PX', rms)
    end
    out[#out + 1] = id
    out[#out + 1] = 1
  end
end
if ring and not flow.rung then
  -- Wakes one blocked receive, which re-runs its script and blocks until this due time.
  redis.call('XADD', bell, 'MAXLEN', '~', 64, '*', 'r', '1')
end
-- One ring per message of a priority above 0 (at most 64), so each may wake a receive.
for _ = 1, math.min(prio_rings, 64) do
  redis.call('XADD', bell, 'MAXLEN', '~', 64, '*', 'r', '1')
end
return out
