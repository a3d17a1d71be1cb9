"""The Lua scripts of the parameter store: each multi-step write or read is one atomic step.

Scripts reach keys through KEYS (the run's keys share one Redis Cluster hash slot) and build
``params:<v>`` keys from the run's prefix in ARGV, as every key is built in store/keys.py.
"""

# Lua shared by the scripts that read the held versions. A hold is
# ``"<version>[,<next>]:<lease expiry, ms>"``: the version a learner computes with and the
# latest it may switch to (read in the same step, so it is pinned before the learner uses it).
# Expired holds are deleted; returns holder -> {versions} and the time (TIME in ms; scripts
# replicate by effects since Redis 5).
LIVE_HOLDS = """
local function live_holds(key)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local flat = redis.call('HGETALL', key)
  local out = {}
  for i = 1, #flat, 2 do
    local vs, expiry = string.match(flat[i + 1], '^([%d,]+):(%d+)$')
    if vs and tonumber(expiry) >= now then
      local list = {}
      for v in string.gmatch(vs, '%d+') do list[#list + 1] = v end
      out[flat[i]] = list
    else
      redis.call('HDEL', key, flat[i])
    end
  end
  return out, now
end

-- record holder's version (and the latest, KEYS[latest_key]; version '' holds the latest
-- itself); the others' versions, flat
local function hold(key, latest_key, holder, version, lease_ms)
  local holds, now = live_holds(key)
  local cur = redis.call('GET', latest_key)
  local pinned = version
  if cur and version == '' then
    pinned = cur
  elseif cur and not string.find(',' .. version .. ',', ',' .. cur .. ',', 1, true) then
    pinned = version .. ',' .. cur
  end
  redis.call('HSET', key, holder, pinned .. ':' .. (now + tonumber(lease_ms)))
  local others = {}
  for h, list in pairs(holds) do
    if h ~= holder then
      others[#others + 1] = h
      others[#others + 1] = list[1]
    end
  end
  return others, cur
end
"""

# KEYS: latest, versions(zset), latest_blob, applied(hash), state (a named state blob), held
# ARGV: prefix, version, blob, keep, allow_rewind, state blob ('' = none), then
# lineage/"seq:version" pairs
PUBLISH = LIVE_HOLDS + """
local v = tonumber(ARGV[2])
local cur = redis.call('GET', KEYS[1])
if cur and tonumber(cur) > v and ARGV[5] ~= '1' then
  return redis.error_reply('STALE publish of version ' .. v .. ' below latest ' .. cur)
end
if cur and tonumber(cur) > v then
  local newer = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. v, '+inf')
  for _, n in ipairs(newer) do
    redis.call('DEL', ARGV[1] .. ':params:' .. n)
    redis.call('ZREM', KEYS[2], n)
  end
end
redis.call('SET', ARGV[1] .. ':params:' .. v, ARGV[3])
redis.call('ZADD', KEYS[2], v, tostring(v))
redis.call('SET', KEYS[1], tostring(v))
redis.call('SET', KEYS[3], ARGV[3])
if ARGV[6] ~= '' then
  redis.call('SET', KEYS[5], ARGV[6])
end
if #ARGV > 6 then
  redis.call('HSET', KEYS[4], unpack(ARGV, 7))
end
local keep = tonumber(ARGV[4])
local n = redis.call('ZCARD', KEYS[2])
local evicted = 0
if n > keep then
  local pinned = {}
  for _, list in pairs(live_holds(KEYS[6])) do
    for _, hv in ipairs(list) do pinned[hv] = true end
  end
  local old = redis.call('ZRANGE', KEYS[2], 0, n - keep - 1)
  for _, o in ipairs(old) do
    if not pinned[o] then
      redis.call('DEL', ARGV[1] .. ':params:' .. o)
      redis.call('ZREM', KEYS[2], o)
      evicted = evicted + 1
    end
  end
end
return evicted
"""

# KEYS: held(hash), latest  ARGV: holder, version, lease_ms.  Records the version ``holder``
# computes with (a lease: it pins nothing once expired) and returns the others',
# {holder, version, ...}.
HOLD = LIVE_HOLDS + """
local others = hold(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])
return others
"""

# KEYS: held, latest, latest_blob  ARGV: holder, version ('' = the latest), lease_ms,
# known_version ('' = none). A hold and a fetch-if-newer in one step: {others, {}} when nothing is published,
# {others, {v}} when v is known, else {others, {v, blob}}.
FETCH_AND_HOLD = LIVE_HOLDS + """
local others, cur = hold(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3])
if not cur then return {others, {}} end
if cur == ARGV[4] then return {others, {cur}} end
return {others, {cur, redis.call('GET', KEYS[3])}}
"""

# KEYS: latest, latest_blob  ARGV: known_version ('' = none)
# Returns {} when nothing is published, {v} when v == known, else {v, blob}.
FETCH_LATEST = """
local cur = redis.call('GET', KEYS[1])
if not cur then return {} end
if cur == ARGV[1] then return {cur} end
return {cur, redis.call('GET', KEYS[2])}
"""

# KEYS: latest, preview, preview_stamp  ARGV: base version, stamp, blob.  A preview of an update
# that is no longer the latest's (its learner lost a race with a retry, or published since) is
# dropped: 0.
PUBLISH_PREVIEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('SET', KEYS[3], ARGV[2])
return 1
"""

# KEYS: latest, latest_blob, preview, preview_stamp  ARGV: known token ('' = none).
# The newest behaviour policy: a preview part-way through updating the latest version if there
# is one, else the latest version.  Returns {} when nothing is published, {token} when the
# caller has it, else {token, blob}; a token is a version or a preview's stamp.
FETCH_NEWEST = """
local cur = redis.call('GET', KEYS[1])
if not cur then return {} end
local stamp = redis.call('GET', KEYS[4])
if stamp and string.sub(stamp, 1, #cur + 1) == cur .. ':' then
  if stamp == ARGV[1] then return {stamp} end
  local blob = redis.call('GET', KEYS[3])
  if blob then return {stamp, blob} end
end
if cur == ARGV[1] then return {cur} end
return {cur, redis.call('GET', KEYS[2])}
"""

# KEYS: latest or latest_blob, applied(hash)  ARGV: lineage.  Returns {value, "seq:version"}
# read together ('' = none; a nil would end the reply array early).
WITH_APPLIED = """
return {redis.call('GET', KEYS[1]) or '', redis.call('HGET', KEYS[2], ARGV[1]) or ''}
"""
