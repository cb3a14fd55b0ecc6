-- Lease ready messages, then admit waiting ones of flow control for the rest.
--
-- KEYS: 1 stream, 2 dead (unused), 3 delayed (unused), 4 parked stream, 5 origins hash,
--       6 doorbell stream, 7 moved hash, 8 uniques (unused), 9 dead ids (unused)
-- ARGV: 1 group, 2 consumer (with its lease suffix), 3 most messages, 4 flow prefix
-- Returns {ms until the next rate-blocked key may admit or -1 (0: keys are left to
--   judge, see BLOCKED_BUDGET), {entry id, fields}, ...}: the entries leased to the
--   consumer, ready ones first, each read by XREADGROUP here.
--
-- A receive runs this only when its own read left room and its receive script said a
-- flow key may admit, so a queue without flows never runs it. Everything happens in
-- this one script: the read of ready messages that arrived since the receive's read
-- (they go first), the admissions, and the read that leases what was admitted. So an
-- admitted message is leased at once, to this consumer, and nothing admitted waits
-- unleased on the stream; a message not admitted spends no delivery.
--
-- Admission (taskrunner.queue_flow): the key of f:ring with the lowest turn goes
-- first; its head (the oldest waiting message of the key) is admitted when its own
-- concurrency has a free slot (f:h:<key>) and its own rate allows it now (GCRA on f:tat:
-- tat - now <= (burst - 1) / rate; then tat = max(tat, now) + 1 / rate), else the key
-- moves to f:slot or f:rate and the next key is tried. An admitted key takes the next
-- number as its turn and stays in the ring if more of its messages wait. Each step is
-- a few O(log n) commands; a blocked key costs one step per time it becomes blocked.
-- The admitted message becomes a stream entry under its own id (field i), like a
-- promoted delayed message; f:adm records that it holds a slot of its key.

local stream, parked, origins, bell, moved = KEYS[1], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local group, consumer, need = ARGV[1], ARGV[2], tonumber(ARGV[3])
flow.prefix, flow.bell = ARGV[4], bell
local p = flow.prefix
-- Float slack on GCRA's comparison (ms), so an admission exactly one interval later is
-- not refused for a rounding error of the sum.
local EPSILON = 1e-6
-- Most keys one call moves out of the ring (blocked) besides those it admits from, so
-- that one script never runs long however many keys became blocked at once; the rest
-- are judged by the next call, which the reply's 0 asks for at once.
local BLOCKED_BUDGET = 1000

local out = {-1}

local function read(count)
  local reply = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count,
    'STREAMS', stream, '>')
  local n = 0
  if reply then
    for _, entry in ipairs(reply[1][2]) do
      out[#out + 1] = entry
      n = n + 1
    end
  end
  return n
end

need = need - read(need)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000

if need > 0 then
  -- Rate keys whose time is past are the same as new ones.
  redis.call('ZREMRANGEBYSCORE', p .. 'tat', '-inf', now)
  -- Keys blocked on their rate whose time has come may admit again.
  local due = redis.call('ZRANGEBYSCORE', p .. 'rate', '-inf', now + EPSILON)
  for _, k in ipairs(due) do
    redis.call('ZREM', p .. 'rate', k)
    redis.call('ZADD', p .. 'ring', redis.call('HGET', p .. 'turn', k) or 0, k)
  end

  local admitted, steps = 0, 0
  local origin_pairs, moved_pairs, held_pairs, gone = {}, {}, {}, {}
  while admitted < need do
    steps = steps + 1
    if steps > need + BLOCKED_BUDGET then
      out[1] = 0
      break
    end
    local first = redis.call('ZRANGE', p .. 'ring', 0, 0, 'WITHSCORES')
    if #first == 0 then
      break
    end
    local k, turn = first[1], first[2]
    local q = p .. 'q:' .. k
    local head = redis.call('ZRANGE', q, 0, 0)
    local r = (#head > 0) and redis.call('XRANGE', parked, head[1], head[1]) or {}
    if #head == 0 then
      redis.call('ZREM', p .. 'ring', k)
    elseif #r == 0 then
      -- Its body is gone (deleted by hand): it cannot be admitted; drop it.
      redis.call('ZREM', q, head[1])
      redis.call('ZREM', p .. 'waiting', head[1])
      if redis.call('EXISTS', q) == 0 then
        redis.call('ZREM', p .. 'ring', k)
      end
    else
      local pid, fields = head[1], r[1][2]
      local f = {}
      for i = 1, #fields, 2 do
        f[fields[i]] = fields[i + 1]
      end
      local blocked = false
      if f['fc'] then
        if redis.call('HLEN', p .. 'h:' .. k) >= tonumber(f['fc']) then
          redis.call('ZREM', p .. 'ring', k)
          redis.call('ZADD', p .. 'slot', turn, k)
          blocked = true
        end
      end
      if not blocked and f['fr'] then
        local interval = 1000 / tonumber(f['fr'])
        local burst = tonumber(f['fb'] or '1')
        local rk = f['fk'] or k
        local tat = redis.call('ZSCORE', p .. 'tat', rk)
        tat = tat and tonumber(tat) or now
        local allowed = tat - (burst - 1) * interval
        if allowed > now + EPSILON then
          redis.call('ZREM', p .. 'ring', k)
          redis.call('ZADD', p .. 'rate', allowed, k)
          blocked = true
        else
          redis.call('ZADD', p .. 'tat', math.max(tat, now) + interval, rk)
        end
      end
      if not blocked then
        redis.call('ZREM', q, pid)
        redis.call('ZREM', p .. 'waiting', pid)
        local seq = flow_next()
        redis.call('HSET', p .. 'turn', k, seq)
        if redis.call('EXISTS', q) == 1 then
          redis.call('ZADD', p .. 'ring', seq, k)
        else
          redis.call('ZREM', p .. 'ring', k)
        end
        local new_id = redis.call('XADD', stream, '*', unpack(fields))
        local message_id, count = f['i'], f['n'] or '0'
        if message_id then
          origin_pairs[#origin_pairs + 1] = new_id
          origin_pairs[#origin_pairs + 1] = message_id .. '/' .. count
          moved_pairs[#moved_pairs + 1] = message_id
          moved_pairs[#moved_pairs + 1] = 's' .. new_id
          held_pairs[#held_pairs + 1] = message_id
          held_pairs[#held_pairs + 1] = k
          redis.call('HSET', p .. 'h:' .. k, message_id, 1)
        end
        gone[#gone + 1] = pid
        admitted = admitted + 1
      end
    end
  end
  if admitted > 0 then
    if #origin_pairs > 0 then
      redis.call('HSET', origins, unpack(origin_pairs))
      redis.call('HSET', moved, unpack(moved_pairs))
      redis.call('HSET', p .. 'adm', unpack(held_pairs))
    end
    redis.call('XDEL', parked, unpack(gone))
    -- The stream held no ready entry after the read above: this reads exactly them.
    read(admitted)
  end
  if admitted == need and redis.call('EXISTS', p .. 'ring') == 1 then
    -- This receive is full and keys may still admit: wake another blocked receive, as
    -- new stream entries wake every blocked reader (each one woken so hands on).
    flow_ring()
  end
end

local wake = flow_first_score(p .. 'rate')
if wake and out[1] ~= 0 then
  out[1] = math.max(0, math.ceil(wake - now))
end
return out
