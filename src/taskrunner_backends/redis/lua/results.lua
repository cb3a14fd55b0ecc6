-- Task results: store ("put") or delete ("delete") results by message id.
--
-- KEYS: 1 results index (zset: message id -> expiry ms), 2 notification stream,
--       then one result key per item, in ARGV's order
-- ARGV: 1 op, 2 the notification stream's MAXLEN (~),
--       put: then 2 per item: message id, TTL in ms (> 0), body  -- 3 per item
--       delete: then the message ids
-- Returns put: the number of results stored; delete: how many of them existed.
--
-- A put is SET PX (last write wins and restarts the TTL) plus the index entry, and
-- one XADD naming the stored ids on the notification stream, which every result
-- listener reads with a blocking XREAD: waiters wake without polling. Ids longer than
-- 128 bytes are named by '#' .. their SHA1, so the notification stream stays small
-- whatever the ids are; a listener only takes a notification as "look again".

local index, done = KEYS[1], KEYS[2]
local op, cap = ARGV[1], ARGV[2]
local CHUNK = 500

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function chunked(cmd, key, items)
  for i = 1, #items, CHUNK do
    redis.call(cmd, key, unpack(items, i, math.min(i + CHUNK - 1, #items)))
  end
end

if op == 'put' then
  local now = now_ms()
  local scored, tokens, seen = {}, {}, {}
  local n = 0
  for i = 3, #ARGV, 3 do
    n = n + 1
    local id, ttl, body = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
    redis.call('SET', KEYS[2 + n], body, 'PX', ttl)
    scored[#scored + 1] = now + ttl
    scored[#scored + 1] = id
    local token = id
    if #id > 128 then
      token = '#' .. redis.sha1hex(id)
    end
    if not seen[token] then
      seen[token] = true
      tokens[#tokens + 1] = 'i'
      tokens[#tokens + 1] = token
    end
  end
  -- Index pairs must stay pairs across chunks: CHUNK is even.
  chunked('ZADD', index, scored)
  -- Entries whose key has expired already; keeps the index as small as the live set.
  redis.call('ZREMRANGEBYSCORE', index, '-inf', '(' .. now)
  for i = 1, #tokens, 1000 do
    redis.call('XADD', done, 'MAXLEN', '~', cap, '*',
      unpack(tokens, i, math.min(i + 999, #tokens)))
  end
  return n
elseif op == 'delete' then
  local n = 0
  local ids = {}
  for i = 3, #ARGV do
    n = n + redis.call('DEL', KEYS[i])
    ids[#ids + 1] = ARGV[i]
  end
  chunked('ZREM', index, ids)
  return n
end
return redis.error_reply('ERR unknown results operation ' .. tostring(op))
