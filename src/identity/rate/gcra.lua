-- GCRA for mcp-edge's fleet-wide rate limits (src/identity/rate/shared.rs), atomic: both
-- buckets are checked before either is taken from, so a refused call takes nothing.
--
-- KEYS[1]  the caller's bucket          ARGV[1], ARGV[2]  its emission interval (us), burst
-- KEYS[2]  the caller's bucket for one tool (optional)    ARGV[3], ARGV[4]  the same for it
--
-- A bucket is its theoretical arrival time (TAT, microseconds on Redis's clock, one clock
-- for every replica); it expires when it would be full again, so an absent key is a full
-- bucket. A request is allowed when TAT + interval - interval * burst <= now.
--
-- Returns {allowed (1 or 0), retry after (us), the refusing bucket's burst, remaining}.

-- Redis before 7 must be told to replicate effects (TIME is not deterministic).
pcall(function() redis.replicate_commands() end)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function check(key, interval, burst)
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  local new_tat = tat + interval
  local allow_at = new_tat - interval * burst
  if allow_at > now then
    return false, allow_at - now, 0, new_tat
  end
  return true, 0, math.floor((now - allow_at) / interval), new_tat
end

local i1, b1 = tonumber(ARGV[1]), tonumber(ARGV[2])
local ok1, wait1, rem1, tat1 = check(KEYS[1], i1, b1)
local ok2, wait2, tat2, b2 = true, 0, 0, 0
if #KEYS > 1 then
  local i2
  i2, b2 = tonumber(ARGV[3]), tonumber(ARGV[4])
  local _
  ok2, wait2, _, tat2 = check(KEYS[2], i2, b2)
end
if ok1 and ok2 then
  redis.call('SET', KEYS[1], string.format('%.0f', tat1), 'PX', math.max(1, math.ceil((tat1 - now) / 1000)))
  if #KEYS > 1 then
    redis.call('SET', KEYS[2], string.format('%.0f', tat2), 'PX', math.max(1, math.ceil((tat2 - now) / 1000)))
  end
  return {1, 0, b1, rem1}
end
if not ok2 and (ok1 or wait2 >= wait1) then
  return {0, wait2, b2, 0}
end
return {0, wait1, b1, 0}
