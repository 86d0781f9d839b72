-- GCRA over several buckets at once (core/ratelimits.py has the same arithmetic in Python).
-- KEYS: the buckets' keys. ARGV: the mode ("admit" or "count"), then each bucket's limit per
-- minute and cost. A key holds its TAT in milliseconds on Redis's clock and expires when the
-- bucket is full again.
-- admit: take every bucket's cost if all have room, none otherwise; answers
--   {admitted (0/1), retry_after_ms, then per bucket: remaining, reset_ms}
-- count: add the costs (negative gives units back) without asking; answers 0.
local PERIOD = 60000
local SLACK = 0.01  -- float error in sums of PERIOD / limit, as SLACK_MS in Python
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local mode = ARGV[1]
local n = #KEYS
local limits, costs, tats = {}, {}, {}
for i = 1, n do
    limits[i] = tonumber(ARGV[2 * i])
    costs[i] = tonumber(ARGV[2 * i + 1])
    local stored = tonumber(redis.call('GET', KEYS[i]))
    if stored == nil or stored < now then
        stored = now
    end
    tats[i] = stored
end

local function store(i, tat)
    local ttl = math.ceil(tat - now)
    if ttl > 0 then
        redis.call('SET', KEYS[i], string.format('%.3f', tat), 'PX', ttl)
    else
        redis.call('DEL', KEYS[i])
    end
end

if mode == 'count' then
    for i = 1, n do
        store(i, tats[i] + PERIOD / limits[i] * costs[i])
    end
    return 0
end

local retry = 0
for i = 1, n do
    local needed = math.min(PERIOD / limits[i] * costs[i], PERIOD)
    local wait = tats[i] - now + needed - PERIOD
    if wait > retry then
        retry = wait
    end
end

local refused = retry > SLACK
local reply = {refused and 0 or 1, refused and math.ceil(retry) or 0}
for i = 1, n do
    local interval = PERIOD / limits[i]
    local tat = tats[i]
    if not refused then
        tat = tat + interval * costs[i]
        store(i, tat)
    end
    local ahead = math.max(tat - now, 0)
    reply[#reply + 1] = math.max(math.floor((PERIOD - ahead + SLACK) / interval), 0)
    reply[#reply + 1] = math.ceil(ahead)
end
return reply
