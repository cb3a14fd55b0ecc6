-- Move dead letters back onto the queue as new messages.
--
-- KEYS: 1 stream, 2 dead-letter stream, 3 dead letters by original id, 4 parked stream,
--       5 moved hash, 6 doorbell stream
-- ARGV: 1 batch size and 2 the last dead-letter id to take, used when no ids are
--       given; 3 flow-control prefix, 4 the consumer group; then the dead-letter ids
--       (optional)
-- Returns the new message ids, one per dead letter moved; unknown ids are skipped.
--
-- XADD and XDEL of each dead letter happen in one script: it is neither lost (both
-- or neither) nor duplicated (a second retry of the same id finds nothing). The
-- message comes back under a new id, so its original id no longer names anything:
-- its index entry goes (only if it still points at this dead letter).
--
-- A dead letter of a message with a flow (fields f, fc, fr, fb, fk) comes back waiting
-- under that flow, at the back of its key's line, as a new add with a flow does (see
-- add_requests.lua): parked under an id reserved from the stream's own sequence.

local stream, dead, dead_ids, parked, moved = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
flow.prefix, flow.bell = ARGV[3], KEYS[6]
local group = ARGV[4]
local ids = {}
if #ARGV > 4 then
  for i = 5, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
else
  for _, e in ipairs(redis.call('XRANGE', dead, '-', ARGV[2], 'COUNT', ARGV[1])) do
    ids[#ids + 1] = e[1]
  end
end

-- The next id of the queue stream's sequence, taken so no later XADD produces it.
local function reserve()
  if redis.call('EXISTS', stream) == 0 then
    redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
  end
  local last = '0-0'
  local info = redis.call('XINFO', 'STREAM', stream)
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      last = info[i + 1]
    end
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ms, seq = string.match(last, '^(%d+)-(%d+)$')
  local id
  if now > tonumber(ms) then
    id = string.format('%d-0', now)
  else
    id = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
  end
  redis.call('XSETID', stream, id)
  return id
end

local FLOW_FIELDS = {f = true, fc = true, fr = true, fb = true, fk = true}

-- A dead letter of priority p (field p) comes back on that priority's stream, as a new
-- add of that priority does (add_requests.lua): fields i, n 0 and p under a reserved id.
local prefix = string.sub(stream, 1, -7)
local function level_stream(level)
  local s = stream .. ':' .. level
  if redis.call('HSET', prefix .. 'levels', level, '1') == 1 or redis.call('EXISTS', s) == 0 then
    local r = redis.pcall('XGROUP', 'CREATE', s, group, '0', 'MKSTREAM')
    if type(r) == 'table' and r.err and not string.find(r.err, 'BUSYGROUP', 1, true) then
      error(r.err)
    end
  end
  return s
end

local out = {}
for _, id in ipairs(ids) do
  local r = redis.call('XRANGE', dead, id, id)
  if #r > 0 then
    local body, original, level = '', nil, nil
    local fields = r[1][2]
    local spec = {}
    for i = 1, #fields, 2 do
      if fields[i] == 'b' then
        body = fields[i + 1]
      elseif fields[i] == 'o' then
        original = fields[i + 1]
      elseif fields[i] == 'p' then
        level = fields[i + 1]
      elseif FLOW_FIELDS[fields[i]] then
        spec[#spec + 1] = fields[i]
        spec[#spec + 1] = fields[i + 1]
      end
    end
    local k = flow_of(spec)
    if k then
      local new_id = reserve()
      local entry = {'b', body, 'i', new_id, 'n', '0', unpack(spec)}
      local parked_id = redis.call('XADD', parked, '*', unpack(entry))
      redis.call('HSET', moved, new_id, 'p' .. parked_id)
      flow_wait(k, parked_id)
      out[#out + 1] = new_id
    elseif level then
      local s = level_stream(level)
      local new_id = reserve()
      local entry = redis.call('XADD', s, '*', 'b', body, 'i', new_id, 'n', '0', 'p', level)
      redis.call('HSET', prefix .. 'origins', entry, new_id .. '/0')
      redis.call('HSET', moved, new_id, 'S' .. level .. entry)
      redis.call('XADD', KEYS[6], 'MAXLEN', '~', 64, '*', 'r', '1')
      out[#out + 1] = new_id
    else
      out[#out + 1] = redis.call('XADD', stream, '*', 'b', body)
    end
    redis.call('XDEL', dead, id)
    if original and redis.call('HGET', dead_ids, original) == id then
      redis.call('HDEL', dead_ids, original)
    end
  end
end
return out
