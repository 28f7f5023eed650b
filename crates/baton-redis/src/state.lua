-- One state change of a shared circuit breaker, atomically. Every key shares the breaker's
-- hash tag, so the script runs on one Redis Cluster slot.
-- KEYS[1]: the state hash; KEYS[2]: the prefix of the other keys (rules, window buckets,
-- probe slots, acknowledged batches, the quorum's set, the transitions channel).
-- ARGV[1]: the operation; then its fields as name, value pairs (see `op.rs`).
-- The rules live in `<prefix>rules`, written once by `configure`; any other operation on a
-- breaker without rules changes nothing and answers `rules 0`, and the caller configures.
-- States: 0 closed, 1 open, 2 half-open, 4 forced closed, 5 isolated.
-- Returns name, value pairs: state, gen, epoch, reason, rarg, rate, open_ms, slot, now, rules.
local st, pre = KEYS[1], KEYS[2]
local op = ARGV[1]
local a = {}
for i = 2, #ARGV - 1, 2 do a[ARGV[i]] = ARGV[i + 1] end
local function num(k) return tonumber(a[k]) or 0 end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if op == 'configure' then
  local r = {}
  for k, v in pairs(a) do r[#r + 1] = k; r[#r + 1] = v end
  redis.call('DEL', pre .. 'rules')
  redis.call('HSET', pre .. 'rules', unpack(r))
end
local rv = redis.call('HMGET', pre .. 'rules', 'threshold', 'rate', 'window', 'min_calls',
  'open_ms', 'growth', 'cap_ms', 'probes', 'max_wait_ms', 'quorum', 'quorum_ms')
local configured = rv[1] ~= false
local threshold, rate = tonumber(rv[1]) or 0, tonumber(rv[2]) or 0
local win, minc = tonumber(rv[3]) or 0, tonumber(rv[4]) or 0
local open_ms, mult, cap = tonumber(rv[5]) or 0, tonumber(rv[6]) or 1, tonumber(rv[7]) or 0
local probes, maxwait = tonumber(rv[8]) or 1, tonumber(rv[9]) or 1
local quorum, qwin = tonumber(rv[10]) or 0, tonumber(rv[11]) or 0

local h = redis.call('HMGET', st, 'state', 'gen', 'reason', 'rarg', 'rate', 'until', 'trips',
  'consec', 'ok', 'epoch')
local state, gen = tonumber(h[1]) or 0, tonumber(h[2]) or 0
local reason, rarg, rrate = tonumber(h[3]) or 9, tonumber(h[4]) or 0, h[5] or '0'
local untl, trips = tonumber(h[6]) or 0, tonumber(h[7]) or 0
local consec, ok = tonumber(h[8]) or 0, tonumber(h[9]) or 0
-- The epoch tells one life of the state from the next (a restarted server starts again).
local epoch = h[10] or tostring(now)
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
  if quorum > 0 then redis.call('DEL', pre .. 'q') end
end

local function slot_key(i) return pre .. 'p:' .. gen .. ':' .. i end

if not configured then
  -- Nothing changes until the caller sends the rules.
elseif op == 'record' then
  -- A batch of closed-state outcomes, counted once: a batch already acknowledged for this
  -- replica (a resend after a lost reply) is skipped. Acknowledgements are per batch: every
  -- batch up to `acks[replica]`, and the later ones in the sorted set `acks:<replica>`, so
  -- that an older batch arriving after a newer one is still counted. A gap 64 batches old
  -- is given up (the replica sends its batches in order: it never leaves one).
  local acks = pre .. 'acks'
  local seen = pre .. 'acks:' .. a.replica
  local last = tonumber(redis.call('HGET', acks, a.replica)) or 0
  local b = num('batch')
  if b > last and not redis.call('ZSCORE', seen, b) then
    redis.call('ZADD', seen, b, b)
    while true do
      local first = tonumber(redis.call('ZRANGE', seen, 0, 0)[1])
      if not first or (first ~= last + 1 and redis.call('ZCARD', seen) <= 64) then break end
      redis.call('ZREM', seen, first)
      last = first
    end
    redis.call('HSET', acks, a.replica, last)
    redis.call('PEXPIRE', acks, 86400000)
    redis.call('PEXPIRE', seen, 86400000)
    if num('gen') == gen and state == 0 and quorum == 0 then
      if num('any_success') == 1 then
        consec = num('tail_failures')
      else
        consec = consec + num('tail_failures')
      end
      if win > 0 and num('calls') > 0 then
        local k = pre .. 'w:' .. math.floor(now / bucket_ms)
        redis.call('HINCRBY', k, 'c', num('calls'))
        redis.call('HINCRBY', k, 'f', num('failures'))
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
  end
elseif op == 'trip' then
  -- Quorum mode: this replica tripped by its own counts. The fleet opens once `quorum`
  -- distinct replicas did within the window (a sorted set of replica ids by time).
  if quorum > 0 and num('gen') == gen and state == 0 then
    local q = pre .. 'q'
    redis.call('ZADD', q, now, a.replica)
    redis.call('ZREMRANGEBYSCORE', q, '-inf', now - qwin)
    redis.call('PEXPIRE', q, qwin)
    local n = redis.call('ZCARD', q)
    if n >= quorum then to(1, 10, n) end
  end
elseif op == 'probe' then
  -- A request for a probe slot, refused once past the instant its caller stops waiting
  -- (`not_after`, Redis time in ms; 0: no bound). The slot names its owner.
  if num('not_after') == 0 or now <= num('not_after') then
    if state == 1 and now >= untl then to(2, 3, 0) end
    -- The slot lives no longer than its caller waits: its attempt deadline, if any.
    local px = maxwait
    if num('slot_ms') > 0 then px = math.min(px, num('slot_ms')) end
    if num('slot_until') > 0 then px = math.min(px, num('slot_until') - now) end
    if state == 2 and px > 0 then
      for i = 1, probes do
        if redis.call('SET', slot_key(i), a.owner, 'NX', 'PX', px) then
          granted = i
          break
        end
      end
    end
  end
elseif op == 'disown' then
  -- A probe request whose answer was lost: free the slot it may have taken.
  for i = 1, probes do
    if redis.call('GET', slot_key(i)) == a.owner then redis.call('DEL', slot_key(i)) end
  end
elseif op == 'probe_end' then
  -- A probe's result: succeeded, failed, or released unused.
  if num('gen') == gen and state == 2 then
    if a.result == 'succeeded' then
      redis.call('SET', slot_key(a.slot), 'done', 'PX', 86400000)
      ok = ok + 1
      if ok >= probes then to(0, 5, probes) end
    elseif a.result == 'failed' then
      to(1, 4, 0)
    else
      redis.call('DEL', slot_key(a.slot))
    end
  end
elseif op == 'control' then
  if a.to == 'isolated' and state ~= 5 then to(5, 7, 0)
  elseif a.to == 'forced_closed' and state ~= 4 then to(4, 8, 0)
  elseif a.to == 'closed' then to(0, 9, 0) end
end

redis.call('HSET', st, 'state', state, 'gen', gen, 'reason', reason, 'rarg', rarg, 'rate', rrate,
  'until', untl, 'trips', trips, 'consec', consec, 'ok', ok, 'epoch', epoch)
if changed then redis.call('PUBLISH', pre .. 'transitions', gen) end
return {'state', state, 'gen', gen, 'epoch', epoch, 'reason', reason, 'rarg', rarg,
  'rate', rrate, 'open_ms', math.max(0, untl - now), 'slot', granted, 'now', now,
  'rules', configured and 1 or 0}
