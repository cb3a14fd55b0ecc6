-- Fenced lease operations: heartbeat, ack, release, dead-letter.
--
-- KEYS: 1 stream, 2 dead-letter stream, 3 delayed zset, 4 parked stream, 5 origins hash,
--       6 doorbell stream, 7 moved hash, 8 uniques zset, 9 dead letters by original id
-- ARGV: 1 op ("heartbeat" | "ack" | "release" | "dead"), 2 group,
--       3 reason (dead) or delay in ms (release), 4 "1" when the server has XACKDEL,
--       5 unique-key prefix, 6 flow-control prefix,
--       then 6 per delivery: entry id, consumer, expected PEL delivery count,
--       message id, reported delivery count, body override ("=" .. bytes), or flags:
--       "u" when the message holds a unique key (its entry's field u), "f" when it
--       was admitted by flow control (field f), both, or ""
-- Returns one status per delivery: 1 done, 0 lease lost (nothing touched),
--       2 lease lost because the payload was gone (a dead letter records it).
--
-- The check and the action run in one script, so no claim can slip between them.
-- XCLAIM checks no owner and XACK is silent; the XPENDING probe is the fence.
--
-- Flow control: ack, dead-letter and release of an admitted message give its slot back
-- (flow_free) in this same script as the outcome, so a key never counts a finished
-- message nor misses a running one. A released message with a flow waits again at the
-- back of its key's messages (flow_wait), at once or, with a delay, from its due time
-- (receive.lua starts it waiting then). A heartbeat changes nothing of it.
--
-- Priorities: the caller runs one call per priority, with that priority's stream
-- (``stream:<p>``) as KEYS[1]. Its entries carry field p, which a release (re-added to
-- the same stream, or parked and promoted back to it) and a dead letter keep.

local stream, dead, delayed, parked, origins = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local bell, moved, uniques, dead_ids = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local op, group, arg, has_xackdel = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'
local uprefix = ARGV[5]
flow.prefix, flow.bell = ARGV[6], bell
local GONE = 'payload removed from the stream while pending'
-- The priority of KEYS[1] (nil: 0). Its entries are never under their message id.
local level = string.match(stream, ':stream:(%d)$')
local moved_tag = level and ('S' .. level) or 's'

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Current lease: pending, owned by `consumer`, and not redelivered since the
-- receipt was issued (the delivery count is the epoch; it defeats ABA).
-- Entries acked earlier in this call: their XACK is deferred to the end (below), so
-- they still look pending to XPENDING; a second ack of one in the same call is stale.
local finished = {}

local function owned(id, consumer, count)
  if finished[id] then
    return false
  end
  local p = redis.pcall('XPENDING', stream, group, id, id, 1)
  if type(p) ~= 'table' or p.err or #p == 0 then
    return false
  end
  return p[1][2] == consumer and tonumber(p[1][4]) == tonumber(count)
end

local function fields_of(id)
  local r = redis.call('XRANGE', stream, id, id)
  if #r == 0 then
    return nil
  end
  return r[1][2]
end

local function body_of(fields)
  if fields then
    for i = 1, #fields, 2 do
      if fields[i] == 'b' then
        return fields[i + 1]
      end
    end
  end
  return ''
end

-- Delete-on-ack: the entry leaves the PEL and the stream together (and a re-added
-- entry's origin record with it).
local function complete(id, message_id)
  if id ~= message_id or level then
    redis.call('HDEL', origins, id)
  end
  if has_xackdel then
    local r = redis.call('XACKDEL', stream, group, 'IDS', 1, id)
    -- Reply codes differ between servers; make sure the PEL entry is gone.
    if r[1] ~= 1 then
      redis.call('XACK', stream, group, id)
      redis.call('XDEL', stream, id)
    end
  else
    redis.call('XACK', stream, group, id)
    redis.call('XDEL', stream, id)
  end
end

-- Ack's share of `complete`, batched: one XACK and one XDEL (or one XACKDEL) for every
-- entry the call completes instead of two commands each, which was most of an ack's
-- server time. Nothing between here and the end of the script reads the PEL of these
-- entries but `owned`, which consults `finished` first.
-- Their origin and moved records and their flow slots go the same way: one HDEL each
-- for the call, and one release of slots per flow key (flow_free_all).
local acked, acked_origins, acked_moved, acked_flows = {}, {}, {}, {}
local function complete_later(id, message_id, flowed)
  if id ~= message_id or level then
    acked_origins[#acked_origins + 1] = id
    acked_moved[#acked_moved + 1] = message_id
  end
  if flowed then
    acked_flows[#acked_flows + 1] = message_id
  end
  finished[id] = true
  acked[#acked + 1] = id
end

local function flush_acked()
  if #acked == 0 then
    return
  end
  flow_chunked('HDEL', origins, acked_origins)
  flow_chunked('HDEL', moved, acked_moved)
  flow_free_all(acked_flows)
  if has_xackdel then
    local r = redis.call('XACKDEL', stream, group, 'IDS', #acked, unpack(acked))
    for i = 1, #acked do
      -- Reply codes differ between servers; make sure the PEL entry is gone.
      if r[i] ~= 1 then
        redis.call('XACK', stream, group, acked[i])
        redis.call('XDEL', stream, acked[i])
      end
    end
  else
    redis.call('XACK', stream, group, unpack(acked))
    redis.call('XDEL', stream, unpack(acked))
  end
end

-- A message frees its unique key at its final outcome, only if the key still names
-- it (after the key expired another message may hold it).
local function free_unique(fields, message_id)
  if not fields then
    return
  end
  for i = 1, #fields, 2 do
    if fields[i] == 'u' then
      local key = uprefix .. fields[i + 1]
      if redis.call('GET', key) == message_id then
        redis.call('DEL', key)
        redis.call('ZREM', uniques, fields[i + 1])
      end
      return
    end
  end
end

-- The message leaves the queue for good: forget where it moved to.
local function forget(id, message_id)
  if id ~= message_id or level then
    redis.call('HDEL', moved, message_id)
  end
end

-- Ring the doorbell when `due` is earlier than every due time parked so far.
local earliest = false
local rung = false
local function park(fields, due)
  if earliest == false then
    local first = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
    earliest = (#first > 0) and tonumber(first[2]) or nil
  end
  if earliest == nil or due < earliest then
    earliest = due
    if not rung then
      redis.call('XADD', bell, 'MAXLEN', '~', 64, '*', 'r', '1')
      rung = true
    end
  end
  local parked_id = redis.call('XADD', parked, '*', unpack(fields))
  redis.call('ZADD', delayed, due, parked_id)
  return parked_id
end

-- The index by original id is what lets lookup find a dead letter by the id the
-- message had; it is the only cost this adds, and only here (not on ack).
-- The time is stored in ms with three decimals (microseconds): a partitioned queue
-- merges the dead letters of several shards by it, and whole ms tie too often.
local function stamp()
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  return string.format('%d.%03d', tonumber(t[1]) * 1000 + math.floor(us / 1000), us % 1000)
end

-- A dead letter of a message with a flow keeps its flow fields (f, fc, fr, fb, fk), so
-- a retry makes it wait under the same flow.
local FLOW_FIELDS = {f = true, fc = true, fr = true, fb = true, fk = true}

local function bury(body, reason, message_id, count, fields)
  local entry = {'b', body, 'r', reason, 'o', message_id, 'c', count, 't', stamp()}
  if level then
    -- A retry puts it back on its priority's stream.
    entry[#entry + 1] = 'p'
    entry[#entry + 1] = level
  end
  if fields and flow_of(fields) then
    for i = 1, #fields, 2 do
      if FLOW_FIELDS[fields[i]] then
        entry[#entry + 1] = fields[i]
        entry[#entry + 1] = fields[i + 1]
      end
    end
  end
  local dead_id = redis.call('XADD', dead, '*', unpack(entry))
  redis.call('HSET', dead_ids, message_id, dead_id)
end

local result = {}
local now = nil
for i = 7, #ARGV, 6 do
  local id, consumer, count = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local message_id, reported, override = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local status = 0
  local flags = string.sub(override, 1, 1) ~= '=' and override or ''
  local flowed = string.find(flags, 'f', 1, true) ~= nil
  if owned(id, consumer, count) then
    now = now or now_ms()
    if op == 'heartbeat' then
      -- JUSTID: idle resets to 0, the delivery count stays.
      local claimed = redis.call('XCLAIM', stream, group, consumer, 0, id, 'JUSTID')
      if #claimed == 0 then
        -- 7.0+: XCLAIM drops a PEL entry whose payload was deleted; record why.
        if id ~= message_id or level then
          redis.call('HDEL', origins, id)
        end
        forget(id, message_id)
        flow_free(message_id)
        bury('', GONE, message_id, reported)
        status = 2
      else
        status = 1
      end
    elseif op == 'ack' then
      if string.find(flags, 'u', 1, true) then
        free_unique(fields_of(id), message_id)
      end
      complete_later(id, message_id, flowed)
      status = 1
    elseif op == 'release' then
      local fields = fields_of(id)
      if fields == nil then
        redis.call('XACK', stream, group, id)
        if id ~= message_id or level then
          redis.call('HDEL', origins, id)
        end
        forget(id, message_id)
        flow_free(message_id)
        bury('', GONE, message_id, reported)
        status = 2
      else
        -- The message comes back as a new entry that remembers its id (i) and its
        -- delivery count so far (n), so the next delivery reports count + 1.
        local copy = {}
        for j = 1, #fields, 2 do
          if fields[j] ~= 'i' and fields[j] ~= 'n' then
            copy[#copy + 1] = fields[j]
            copy[#copy + 1] = fields[j + 1]
          end
        end
        copy[#copy + 1] = 'i'
        copy[#copy + 1] = message_id
        copy[#copy + 1] = 'n'
        copy[#copy + 1] = reported
        -- Its unique key (u) travels with it: a release is no final outcome.
        local delay = tonumber(arg)
        local k = flow_of(copy)
        if k then
          flow_free(message_id)
        end
        if k and delay <= 0 then
          local parked_id = redis.call('XADD', parked, '*', unpack(copy))
          redis.call('HSET', moved, message_id, 'p' .. parked_id)
          flow_wait(k, parked_id)
        elseif delay <= 0 then
          local new_id = redis.call('XADD', stream, '*', unpack(copy))
          redis.call('HSET', origins, new_id, message_id .. '/' .. reported)
          redis.call('HSET', moved, message_id, moved_tag .. new_id)
        else
          local parked_id = park(copy, now + delay)
          redis.call('HSET', moved, message_id, 'p' .. parked_id)
        end
        complete(id, message_id)
        status = 1
      end
    elseif op == 'dead' then
      local body, fields
      if string.sub(override, 1, 1) == '=' then
        body = string.sub(override, 2)
      else
        fields = fields_of(id)
        body = body_of(fields)
        free_unique(fields, message_id)
        if flowed then
          flow_free(message_id)
        end
      end
      complete(id, message_id)
      forget(id, message_id)
      bury(body, arg, message_id, reported, fields)
      status = 1
    else
      return redis.error_reply('ERR unknown fenced operation ' .. tostring(op))
    end
  end
  result[#result + 1] = status
end
flush_acked()
return result
