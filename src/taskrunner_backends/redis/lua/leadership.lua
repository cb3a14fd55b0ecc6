-- Leader leases with fencing tokens, and fire-once records of periodic schedules.
--
-- KEYS: 1 leaders hash, 2 fired hash, 3 stream
-- ARGV: 1 op, then per op:
--   acquire  name holder ttl_ms         -> {holder, token, remaining ms} or false
--   renew    name holder token ttl_ms   -> {holder, token, remaining ms} or false
--   resign   name holder token          -> 1 or 0
--   current  name                       -> {holder, token, remaining ms} or false
--   fire     election token schedule instant body -> message id or false
--   records  schedule...                -> {value or false, ...} ("instant message-id")
--
-- A lease is one field of `leaders`: "token|expiry ms|holder", expiry on the server's
-- clock. The field outlives its lease, so the election's latest token is never
-- forgotten: the next holder (or a retake after a lapse) gets token + 1, and a
-- lapsed lease nobody took still renews. Resigning empties the holder.

local leaders, fired, stream = KEYS[1], KEYS[2], KEYS[3]
local op = ARGV[1]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function read(name)
  local v = redis.call('HGET', leaders, name)
  if not v then
    return nil
  end
  local token, expiry, holder = string.match(v, '^(%d+)|(%-?%d+)|(.*)$')
  return {token = tonumber(token), expiry = tonumber(expiry), holder = holder}
end

local function write(name, token, expiry, holder)
  redis.call('HSET', leaders, name, string.format('%d|%d|', token, expiry) .. holder)
end

local function lease(rec)
  return {rec.holder, string.format('%d', rec.token), rec.expiry - now}
end

if op == 'acquire' then
  local name, holder, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
  local rec = read(name)
  if rec and rec.expiry > now and rec.holder ~= '' then
    if rec.holder ~= holder then
      return false
    end
    rec.expiry = now + ttl
  else
    rec = {token = (rec and rec.token or 0) + 1, expiry = now + ttl, holder = holder}
  end
  write(name, rec.token, rec.expiry, rec.holder)
  return lease(rec)
elseif op == 'renew' then
  local name, holder, token, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  local rec = read(name)
  if not rec or rec.holder ~= holder or rec.token ~= token then
    return false
  end
  rec.expiry = now + ttl
  write(name, rec.token, rec.expiry, rec.holder)
  return lease(rec)
elseif op == 'resign' then
  local name, holder, token = ARGV[2], ARGV[3], tonumber(ARGV[4])
  local rec = read(name)
  if not rec or rec.holder ~= holder or rec.token ~= token then
    return 0
  end
  write(name, rec.token, 0, '')
  return 1
elseif op == 'current' then
  local rec = read(ARGV[2])
  if not rec or rec.holder == '' or rec.expiry <= now then
    return false
  end
  return lease(rec)
elseif op == 'fire' then
  local election, token, schedule = ARGV[2], tonumber(ARGV[3]), ARGV[4]
  local instant, body = ARGV[5], ARGV[6]
  local rec = read(election)
  if not rec or rec.token ~= token then
    return false
  end
  local last = redis.call('HGET', fired, schedule)
  if last and tonumber(string.match(last, '^(%S+)')) >= tonumber(instant) then
    return false
  end
  local id = redis.call('XADD', stream, '*', 'b', body)
  redis.call('HSET', fired, schedule, instant .. ' ' .. id)
  return id
elseif op == 'records' then
  local out = {}
  for i = 2, #ARGV do
    out[#out + 1] = redis.call('HGET', fired, ARGV[i])
  end
  return out
end
return redis.error_reply('ERR unknown leadership operation ' .. tostring(op))
