-- Lease ready messages, then admit waiting ones of flow control for the rest.
--
-- KEYS: 1 stream, 2 dead (unused), 3 delayed (unused), 4 parked stream, 5 origins hash,
--       6 doorbell stream, 7 moved hash, 8 uniques (unused), 9 dead ids (unused)
-- ARGV: 1 group, 2 consumer (with its lease suffix), 3 most messages, 4 flow prefix
-- Returns {ms until the next rate-blocked key may admit or -1 (0: keys are left to
--   judge, see BLOCKED_BUDGET), how many it admitted, {entry id, fields}, ...}: the
--   ready entries it leased to the consumer before admitting.
--
-- A receive runs this only when its own read left room and its receive script said a
-- flow key may admit, so a queue without flows never runs it. The script first leases
-- ready messages that arrived since the receive's read (they go first), then admits
-- waiting messages for the rest: each becomes a stream entry, after every entry the
-- group has not read, so the receive's next read (XREADGROUP COUNT admitted, its own
-- command right after this script) leases them. Not here: a script's reply is built
-- from Lua tables, and converting every admitted entry into one and back was over
-- half of an admission's server time. An admitted entry another receive reads first
-- is leased all the same, and one left unread (the receive was cancelled in between)
-- is ready on the stream holding its slot, for the next read of any receive. A
-- message not admitted spends no delivery.
--
-- Admission (taskrunner.queue_flow): the key of f:ring with the lowest turn goes
-- first; its head (the oldest waiting message of the key) is admitted when its own
-- concurrency has a free slot (f:h:<key>) and its own rate allows it now, else the key
-- moves to f:slot or f:rate and the next key is tried. An admitted key takes the next
-- number as its turn, which is higher than every turn in the ring, so it goes last.
-- That makes one call's admissions rounds over the ring: each key of the ring in turn
-- order, then the keys that admitted, in the order they did, and so on. This script
-- plays those rounds on what it read and writes the ring, the keys' turns, slots and
-- rates once at the end, so an admission costs two commands of its own (read the
-- parked body, add it to the stream) and a share of one command per key and per call.
--
-- Rate (GCRA on the server's clock, f:tat): a head is admitted at `now` when
-- tat - now <= (burst - 1) / rate; admission sets tat = max(tat, now - credit) + 1 / rate,
-- where credit = min(interval / 2, CREDIT_MS): an admission that comes late by less
-- than that (a receive woken a little after the key's time) keeps the key's schedule
-- instead of losing the lateness. No window of length W then holds more than
-- 1 + floor((W + (burst - 1) / rate + credit) * rate) admissions, which is
-- burst + W * rate for whole multiples of the interval, as without the credit. `now` is
-- read again when a key's next time is under READ_CLOCK_MS away, so a high rate is not
-- held to one admission per call by a clock read once.

local stream, parked, origins, bell, moved = KEYS[1], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local group, consumer, need = ARGV[1], ARGV[2], tonumber(ARGV[3])
flow.prefix, flow.bell = ARGV[4], bell
local p = flow.prefix
-- Float slack on GCRA's comparison (ms), so an admission exactly one interval later is
-- not refused for a rounding error of the sum.
local EPSILON = 1e-6
-- Most keys one call judges blocked besides those it admits from, so that one script
-- never runs long however many keys became blocked at once; the rest are judged by the
-- next call, which the reply's 0 asks for at once.
local BLOCKED_BUDGET = 1000
local CREDIT_MS = 50
local READ_CLOCK_MS = 1
-- Most members one command takes (Lua's unpack has a stack limit).
local CHUNK = 4000

local out = {-1, 0}

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

local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

need = need - read(need)

local now = clock()

if need > 0 then
  redis.call('ZREMRANGEBYSCORE', p .. 'tat', '-inf', now - CREDIT_MS)
  -- Keys blocked on their rate whose time has come may admit again.
  local due = redis.call('ZRANGEBYSCORE', p .. 'rate', '-inf', now + EPSILON)
  if #due > 0 then
    flow_chunked('ZREM', p .. 'rate', due, CHUNK)
    local back = {}
    for _, k in ipairs(due) do
      back[#back + 1] = redis.call('HGET', p .. 'turn', k) or 0
      back[#back + 1] = k
    end
    flow_chunked('ZADD', p .. 'ring', back, 2 * CHUNK)
  end

  local seq = tonumber(redis.call('HGET', p .. 'seq', 'n') or '0')
  local ring_len = redis.call('ZCARD', p .. 'ring')
  local ring_keys, ring_at = {}, 0   -- a window of the ring, read in chunks
  local ring_read = 0
  local again, again_at, again_end = {}, 1, 0  -- keys that admitted, in that order
  local st = {}                      -- per key: what this call read and did
  local touched = {}                 -- keys in the order first judged
  local tats = {}                    -- rate key -> tat (false: none)
  local tat_changed = {}
  local admitted, blocked_steps = 0, 0
  local origin_pairs, moved_pairs, held_pairs, gone_pids = {}, {}, {}, {}

  local function next_key()
    if ring_at < ring_len then
      if ring_at >= ring_read then
        local want = math.min(ring_len - ring_read, math.max(need - admitted, 16))
        local got = redis.call('ZRANGE', p .. 'ring', ring_read, ring_read + want - 1,
          'WITHSCORES')
        for i = 1, #got, 2 do
          ring_keys[ring_read + (i + 1) / 2] = {got[i], tonumber(got[i + 1])}
        end
        ring_read = ring_read + want
        if #got == 0 then
          ring_len = ring_at
          return next_key()
        end
      end
      ring_at = ring_at + 1
      local entry = ring_keys[ring_at]
      ring_keys[ring_at] = nil
      return entry[1], entry[2]
    end
    local k = again[again_at]
    if again_at <= again_end then
      again[again_at] = nil
      again_at = again_at + 1
      return k, st[k].turn
    end
    return nil
  end

  -- The next waiting parked id of key state `s`, reading its zset in chunks.
  local function head(s)
    if s.at > #s.pids then
      if s.read >= s.count then
        return nil
      end
      local want = math.min(s.count - s.read, math.max(need - admitted, 1))
      local got = redis.call('ZRANGE', s.q, s.read, s.read + want - 1)
      s.read = s.read + want
      if #got == 0 then
        s.count = s.read - want
        return nil
      end
      s.pids, s.at = got, 1
    end
    return s.pids[s.at]
  end

  while admitted < need do
    local k, turn = next_key()
    if not k then
      break
    end
    local s = st[k]
    if not s then
      local q = p .. 'q:' .. k
      s = {q = q, count = redis.call('ZCARD', q), read = 0, pids = {}, at = 1,
           used = {}, consumed = 0, holders = {}, held = nil, turn = turn,
           fate = 'ring'}
      st[k] = s
      touched[#touched + 1] = k
    end
    s.turn = turn
    -- Judge the key's head; a head whose body is gone (deleted by hand) is dropped.
    local judged = false
    while not judged do
      local pid = head(s)
      if not pid then
        s.fate = 'empty'
        break
      end
      local r = redis.call('XRANGE', parked, pid, pid)
      s.at = s.at + 1
      s.used[#s.used + 1] = pid
      s.consumed = s.consumed + 1
      if #r == 0 then
        gone_pids[#gone_pids + 1] = pid
      else
        judged = true
        local fields = r[1][2]
        local f = {}
        for i = 1, #fields, 2 do
          f[fields[i]] = fields[i + 1]
        end
        local blocked = false
        if f['fc'] then
          if s.held == nil then
            s.held = redis.call('HLEN', p .. 'h:' .. k)
          end
          if s.held + #s.holders / 2 >= tonumber(f['fc']) then
            s.fate, s.score = 'slot', turn
            blocked = true
          end
        end
        local rk, tat, interval
        if not blocked and f['fr'] then
          interval = 1000 / tonumber(f['fr'])
          local burst = tonumber(f['fb'] or '1')
          rk = f['fk'] or k
          if tats[rk] == nil then
            local v = redis.call('ZSCORE', p .. 'tat', rk)
            tats[rk] = v and tonumber(v) or false
          end
          tat = tats[rk] or now
          local allowed = tat - (burst - 1) * interval
          if allowed > now + EPSILON and allowed - now < READ_CLOCK_MS then
            now = clock()
            tat = tats[rk] or now
            allowed = tat - (burst - 1) * interval
          end
          if allowed > now + EPSILON then
            s.fate, s.score = 'rate', allowed
            blocked = true
          end
        end
        if blocked then
          -- The head stays waiting: it is not used.
          s.at = s.at - 1
          s.used[#s.used] = nil
          s.consumed = s.consumed - 1
          blocked_steps = blocked_steps + 1
        else
          if rk then
            local credit = math.min(interval / 2, CREDIT_MS)
            tats[rk] = math.max(tat, now - credit) + interval
            tat_changed[rk] = true
          end
          gone_pids[#gone_pids + 1] = pid
          seq = seq + 1
          s.turn, s.admitted = seq, true
          local new_id = redis.call('XADD', stream, '*', unpack(fields))
          local message_id, count = f['i'], f['n'] or '0'
          if message_id then
            origin_pairs[#origin_pairs + 1] = new_id
            origin_pairs[#origin_pairs + 1] = message_id .. '/' .. count
            moved_pairs[#moved_pairs + 1] = message_id
            moved_pairs[#moved_pairs + 1] = 's' .. new_id
            held_pairs[#held_pairs + 1] = message_id
            held_pairs[#held_pairs + 1] = k
            s.holders[#s.holders + 1] = message_id
            s.holders[#s.holders + 1] = 1
          end
          admitted = admitted + 1
          if s.consumed < s.count then
            again_end = again_end + 1
            again[again_end] = k
          else
            s.fate = 'empty'
          end
        end
      end
    end
    if blocked_steps + admitted >= BLOCKED_BUDGET + need then
      out[1] = 0
      break
    end
  end

  -- Write back what the rounds did: each judged key ends in exactly one place.
  local used_all, turn_pairs, ring_add, ring_rem, slot_add, rate_add = {}, {}, {}, {}, {}, {}
  for _, k in ipairs(touched) do
    local s = st[k]
    if #s.used > 0 then
      flow_chunked('ZREM', s.q, s.used, CHUNK)
      for _, pid in ipairs(s.used) do
        used_all[#used_all + 1] = pid
      end
    end
    if #s.holders > 0 then
      flow_chunked('HSET', p .. 'h:' .. k, s.holders, 2 * CHUNK)
    end
    if s.admitted then
      turn_pairs[#turn_pairs + 1] = k
      turn_pairs[#turn_pairs + 1] = s.turn
    end
    if s.fate == 'empty' then
      ring_rem[#ring_rem + 1] = k
    elseif s.fate == 'slot' then
      ring_rem[#ring_rem + 1] = k
      slot_add[#slot_add + 1] = s.score
      slot_add[#slot_add + 1] = k
    elseif s.fate == 'rate' then
      ring_rem[#ring_rem + 1] = k
      rate_add[#rate_add + 1] = s.score
      rate_add[#rate_add + 1] = k
    elseif s.admitted then
      ring_add[#ring_add + 1] = s.turn
      ring_add[#ring_add + 1] = k
    end
  end
  flow_chunked('ZREM', p .. 'waiting', used_all, CHUNK)
  flow_chunked('ZREM', p .. 'ring', ring_rem, CHUNK)
  flow_chunked('ZADD', p .. 'ring', ring_add, 2 * CHUNK)
  flow_chunked('ZADD', p .. 'slot', slot_add, 2 * CHUNK)
  flow_chunked('ZADD', p .. 'rate', rate_add, 2 * CHUNK)
  flow_chunked('HSET', p .. 'turn', turn_pairs, 2 * CHUNK)
  if admitted > 0 then
    redis.call('HSET', p .. 'seq', 'n', seq)
    local tat_pairs = {}
    for rk, _ in pairs(tat_changed) do
      tat_pairs[#tat_pairs + 1] = tats[rk]
      tat_pairs[#tat_pairs + 1] = rk
    end
    flow_chunked('ZADD', p .. 'tat', tat_pairs, 2 * CHUNK)
    flow_chunked('HSET', origins, origin_pairs, 2 * CHUNK)
    flow_chunked('HSET', moved, moved_pairs, 2 * CHUNK)
    flow_chunked('HSET', p .. 'adm', held_pairs, 2 * CHUNK)
  end
  flow_chunked('XDEL', parked, gone_pids, CHUNK)
  out[2] = admitted
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
