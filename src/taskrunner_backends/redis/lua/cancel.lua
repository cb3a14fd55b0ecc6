-- Remove ready or delayed messages so they are never delivered; free their unique keys.
--
-- KEYS: 1 stream, 2 dead (unused), 3 delayed zset, 4 parked stream, 5 origins hash,
--       6 doorbell, 7 moved hash, 8 uniques zset, 9 dead ids (unused)
-- ARGV: 1 group, 2 unique-key prefix, 3 flow-control prefix, then message ids
-- Returns one flag per id: 1 removed, 0 not removable (in flight, gone or unknown).
--
-- A message whose entry id is its message id is a plain stream entry; any other
-- (released, or added with a delay) is found through `moved`. A stream entry is ready
-- when it is newer than the group's last-delivered id: XREADGROUP > has not handed it
-- to anyone, so it is in no PEL. Older entries still in the stream are in flight.
-- A message waiting for flow control's admission is parked too (in its key's f:q:
-- zset, not in the delayed set): it leaves its key's line and holds no slot to free.
-- A message of a priority above 0 is an entry of that priority's stream, which `moved`
-- names as S<priority><entry id>; that stream's group cursor says whether it is ready.

local stream, delayed, parked, origins = KEYS[1], KEYS[3], KEYS[4], KEYS[5]
local moved, uniques = KEYS[7], KEYS[8]
local group, uprefix = ARGV[1], ARGV[2]
flow.prefix, flow.bell = ARGV[3], KEYS[6]

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

-- Each stream's group cursor, read once: {ms, seq}.
local cursors = {}
local function delivered_up_to(key)
  local c = cursors[key]
  if c == nil then
    c = {0, 0}
    local groups = redis.pcall('XINFO', 'GROUPS', key)
    if type(groups) == 'table' and not groups.err then
      for _, g in ipairs(groups) do
        local m = {}
        for i = 1, #g, 2 do
          m[g[i]] = g[i + 1]
        end
        if m['name'] == group then
          c = {parse(m['last-delivered-id'])}
        end
      end
    end
    cursors[key] = c
  end
  return c[1], c[2]
end

local function field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then
      return fields[i + 1]
    end
  end
  return nil
end

-- The fields of stream entry `id` when it is ready (never delivered), else nil.
local function ready(id, key)
  key = key or stream
  local r = redis.call('XRANGE', key, id, id)
  if #r == 0 then
    return nil
  end
  local ms, seq = parse(id)
  local cms, cseq = delivered_up_to(key)
  if ms < cms or (ms == cms and seq <= cseq) then
    return nil
  end
  return r[1][2]
end

local function free(fields, message_id)
  local ukey = fields and field(fields, 'u')
  if ukey and redis.call('GET', uprefix .. ukey) == message_id then
    redis.call('DEL', uprefix .. ukey)
    redis.call('ZREM', uniques, ukey)
  end
end

local out = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local done = 0
  local loc = redis.call('HGET', moved, id)
  if loc then
    local kind, where = string.sub(loc, 1, 1), string.sub(loc, 2)
    if kind == 'p' then
      if redis.call('ZSCORE', delayed, where) then
        local r = redis.call('XRANGE', parked, where, where)
        redis.call('XDEL', parked, where)
        redis.call('ZREM', delayed, where)
        redis.call('HDEL', moved, id)
        free(r[1] and r[1][2], id)
        done = 1
      else
        local r = redis.call('XRANGE', parked, where, where)
        local k = r[1] and flow_of(r[1][2])
        if k and flow_unwait(k, where) then
          redis.call('XDEL', parked, where)
          redis.call('HDEL', moved, id)
          free(r[1][2], id)
          done = 1
        end
      end
    else
      local key = stream
      if kind == 'S' then
        key, where = stream .. ':' .. string.sub(where, 1, 1), string.sub(where, 2)
      end
      local fields = ready(where, key)
      if fields then
        redis.call('XDEL', key, where)
        redis.call('HDEL', origins, where)
        redis.call('HDEL', moved, id)
        free(fields, id)
        done = 1
      end
    end
  else
    local fields = ready(id)
    -- An entry carrying another message's id (i) is that message, not this id.
    if fields and (field(fields, 'i') == nil or field(fields, 'i') == id) then
      redis.call('XDEL', stream, id)
      free(fields, id)
      done = 1
    end
  end
  out[#out + 1] = done
end
return out
