-- One decision of a rate limiter shared by the fleet (GCRA), atomically, on Redis's clock.
-- KEYS[1]: the theoretical arrival time (TAT) in microseconds of Redis time.
-- ARGV[1]: the operation (`take`, `consume`, `peek`); then name, value pairs (`limit.rs`):
-- interval_us (the emission interval), tolerance_us ((burst - 1) intervals), max_wait_us,
-- permits (for `consume`).
-- `take` reserves one permit if it conforms within max_wait_us; `consume` counts permits
-- granted elsewhere (they move the TAT on unconditionally); `peek` changes nothing.
-- Returns name, value pairs: granted (1 or 0), wait_us (until the permit conforms).
local a = {}
for i = 2, #ARGV - 1, 2 do a[ARGV[i]] = tonumber(ARGV[i + 1]) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if ARGV[1] == 'peek' then return {'granted', 1, 'wait_us', 0} end
local interval, tolerance = a.interval_us or 1, a.tolerance_us or 0
local tat = tonumber(redis.call('GET', KEYS[1])) or now
local from = math.max(tat, now)
local wait = math.max(0, from - tolerance - now)
local permits = 1
if ARGV[1] == 'take' then
  if wait > (a.max_wait_us or 0) then return {'granted', 0, 'wait_us', wait} end
else
  permits = a.permits or 1
end
local next_tat = from + interval * permits
redis.call('SET', KEYS[1], string.format('%.0f', next_tat), 'PX',
  math.floor((next_tat - now) / 1000) + 1000)
return {'granted', 1, 'wait_us', wait}
