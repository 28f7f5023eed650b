-- One state change of a shared circuit breaker, atomically. Every key shares the breaker's
-- hash tag, so the script runs on one Redis Cluster slot.
-- KEYS[1]: the state hash; KEYS[2]: the prefix of the window buckets and probe slots.
-- ARGV: op, generation, a1..a4, then the rules: consecutive threshold (0: none), failure
-- rate threshold (0: none), window ms, min calls, open ms, growth multiplier, growth cap ms,
-- probes, probe max wait ms, the transitions channel.
-- States: 0 closed, 1 open, 2 half-open, 4 forced closed, 5 isolated.
-- Returns {state, generation, reason, reason argument, rate, open ms left, probe slot}.
local st, pre = KEYS[1], KEYS[2]
local op, egen = ARGV[1], tonumber(ARGV[2])
local a1, a2, a3, a4 = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local threshold, rate = tonumber(ARGV[7]), tonumber(ARGV[8])
local win, minc = tonumber(ARGV[9]), tonumber(ARGV[10])
local open_ms, mult, cap = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
local probes, maxwait, chan = tonumber(ARGV[14]), tonumber(ARGV[15]), ARGV[16]

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', st, 'state', 'gen', 'reason', 'rarg', 'rate', 'until', 'trips', 'consec', 'ok')
local state, gen = tonumber(h[1]) or 0, tonumber(h[2]) or 0
local reason, rarg, rrate = tonumber(h[3]) or 9, tonumber(h[4]) or 0, h[5] or '0'
local untl, trips = tonumber(h[6]) or 0, tonumber(h[7]) or 0
local consec, ok = tonumber(h[8]) or 0, tonumber(h[9]) or 0
local granted = 0
local bucket_ms = math.max(1, math.floor(win / 10))
local changed = false

local function buckets()
  local b = math.floor(now / bucket_ms)
  local calls, fails = 0, 0
  for i = 0, 9 do
    local v = redis.call('HMGET', pre .. 'w:' .. (b - i), 'c', 'f')
    calls = calls + (tonumber(v[1]) or 0)
    fails = fails + (tonumber(v[2]) or 0)
  end
  return calls, fails
end

local function to(s, r, arg)
  state, gen, reason, rarg, consec, ok, changed = s, gen + 1, r, arg, 0, 0, true
  if s == 1 then
    local d = open_ms
    if mult > 1 then d = math.min(cap, open_ms * mult ^ trips) end
    untl = now + math.floor(d)
    trips = trips + 1
  elseif s ~= 2 then
    trips = 0
  end
  if win > 0 then
    local b = math.floor(now / bucket_ms)
    for i = 0, 10 do redis.call('DEL', pre .. 'w:' .. (b - i)) end
  end
end

if op == 'rec' then
  -- A batch of closed-state outcomes: a1 any success, a2 failures after the last success,
  -- a3 failures, a4 calls.
  if egen == gen and state == 0 then
    if a1 == 1 then consec = a2 else consec = consec + a2 end
    if win > 0 and a4 > 0 then
      local k = pre .. 'w:' .. math.floor(now / bucket_ms)
      redis.call('HINCRBY', k, 'c', a4)
      redis.call('HINCRBY', k, 'f', a3)
      redis.call('PEXPIRE', k, win + bucket_ms)
    end
    if threshold > 0 and consec >= threshold then
      to(1, 1, threshold)
    elseif rate > 0 and win > 0 then
      local calls, fails = buckets()
      if calls >= minc and calls > 0 and fails / calls >= rate then
        rrate = tostring(fails / calls)
        to(1, 2, calls)
      end
    end
  end
elseif op == 'probe' then
  if state == 1 and now >= untl then to(2, 3, 0) end
  if state == 2 then
    for i = 1, probes do
      if redis.call('SET', pre .. 'p:' .. gen .. ':' .. i, '1', 'NX', 'PX', maxwait) then
        granted = i
        break
      end
    end
  end
elseif op == 'pres' then
  -- A probe's result: a1 its slot, a2 1 success, 2 failure, 3 released.
  if egen == gen and state == 2 then
    local k = pre .. 'p:' .. gen .. ':' .. a1
    if a2 == 1 then
      redis.call('SET', k, 'done', 'PX', 86400000)
      ok = ok + 1
      if ok >= probes then to(0, 5, probes) end
    elseif a2 == 2 then
      to(1, 4, 0)
    else
      redis.call('DEL', k)
    end
  end
elseif op == 'ctl' then
  -- A manual transition: a1 1 isolate, 2 force closed, 3 reset.
  if a1 == 1 and state ~= 5 then to(5, 7, 0)
  elseif a1 == 2 and state ~= 4 then to(4, 8, 0)
  elseif a1 == 3 then to(0, 9, 0) end
end

redis.call('HSET', st, 'state', state, 'gen', gen, 'reason', reason, 'rarg', rarg, 'rate', rrate,
  'until', untl, 'trips', trips, 'consec', consec, 'ok', ok)
if changed then redis.call('PUBLISH', chan, gen) end
return {state, gen, reason, rarg, rrate, math.max(0, untl - now), granted}
