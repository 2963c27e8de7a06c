-- Apply one chunk of changes atomically (see workers/apply.py for the layout).
-- Run with epoch.lua in front (it defines ensure_epoch).
--
-- KEYS[1] site events stream, KEYS[2] owner hash, KEYS[3] fingerprints hash,
-- KEYS[4] expiry zset, KEYS[5] meta hash; then three keys per item: object
-- hash, its index set (user's live jobs, or the node/queue index), its own
-- stream (user's events, or the site stream again for nodes and queues).
--
-- ARGV: cycle, now_ms, site_maxlen, user_maxlen, ttl_s, min_id, all_channel,
-- n_items, the epoch the events were made for, then ensure_epoch's owner flag,
-- new epoch name and time (epoch.py: epoch_args), then publish (PUBLISH, or
-- SPUBLISH on a Redis Cluster: sharded channels, which share the site's slot),
-- then per item 12 header values and 2*nfields field/value strings.
--
-- Check first, write after: if the site's epoch is not the one the worker made
-- the events for (a new one began: Redis lost data), or any object's version
-- and epoch are not the ones the worker read, nothing is written and the worker
-- re-reads and retries.

local cycle = ARGV[1]
local now_ms = tonumber(ARGV[2])
local site_maxlen = ARGV[3]
local user_maxlen = ARGV[4]
local ttl = tonumber(ARGV[5])
local min_id = ARGV[6]
local all_channel = ARGV[7]
local n = tonumber(ARGV[8])
local publish = ARGV[14]
local HEADER = 12
local FIRST_KEY = 5

local now_epoch = ensure_epoch(KEYS[5], tonumber(ARGV[10]), ARGV[11] == '1', ARGV[12], ARGV[13])
if now_epoch[1] ~= ARGV[9] then
  return {'epoch', now_epoch[1]}
end

-- pass 1: locate items and check versions
local items = {}
local pos = 15
for i = 1, n do
  local it = {
    op = ARGV[pos], expected = ARGV[pos + 1], oid = ARGV[pos + 2], user = ARGV[pos + 3],
    channel = ARGV[pos + 4], eid = ARGV[pos + 5], etype = ARGV[pos + 6], json = ARGV[pos + 7],
    fp_field = ARGV[pos + 8], fp_value = ARGV[pos + 9], final = ARGV[pos + 10],
    nfields = tonumber(ARGV[pos + 11]), first = pos + HEADER,
    key = KEYS[FIRST_KEY + (i - 1) * 3 + 1], set = KEYS[FIRST_KEY + (i - 1) * 3 + 2],
    stream = KEYS[FIRST_KEY + (i - 1) * 3 + 3],
  }
  local stored = redis.call('HMGET', it.key, 'version', 'epoch')
  local seen = ''
  if stored[1] then
    seen = stored[1] .. ':' .. (stored[2] or '')
  end
  if seen ~= it.expected then
    return {'conflict', i}
  end
  items[i] = it
  pos = pos + HEADER + 2 * it.nfields
end

-- pass 2: write
local events = 0
local trimmed = {}
local fp_set, fp_del, owners = {}, {}, {}
for i = 1, n do
  local it = items[i]
  local is_new = it.expected == ''
  if it.op == 'remove' then
    redis.call('DEL', it.key)
    redis.call('SREM', it.set, it.oid)
  elseif it.nfields > 0 then
    redis.call('HSET', it.key, unpack(ARGV, it.first, it.first + 2 * it.nfields - 1))
  end
  if it.etype ~= '' then
    events = events + 1
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', site_maxlen, '*', 'id', it.eid, 'type', it.etype, 'event', it.json)
    if it.stream ~= KEYS[1] then
      redis.call('XADD', it.stream, 'MAXLEN', '~', user_maxlen, '*', 'id', it.eid, 'type', it.etype, 'event', it.json)
      if min_id ~= '' and not trimmed[it.stream] then
        trimmed[it.stream] = true
        redis.call('XTRIM', it.stream, 'MINID', '~', min_id)
      end
    end
    redis.call(publish, it.channel, it.json)
    redis.call(publish, all_channel, it.json)
    if it.op ~= 'remove' then
      if is_new and it.user ~= '' then
        owners[#owners + 1] = it.oid
        owners[#owners + 1] = it.user
      end
      if it.final == '1' then
        redis.call('SREM', it.set, it.oid)
        redis.call('EXPIRE', it.key, ttl)
        redis.call('ZADD', KEYS[4], math.floor(now_ms / 1000) + ttl, it.oid)
      elseif is_new then
        redis.call('SADD', it.set, it.oid)
      end
    end
  end
  if it.fp_field ~= '' then
    if it.fp_value ~= '' then
      fp_set[#fp_set + 1] = it.fp_field
      fp_set[#fp_set + 1] = it.fp_value
    else
      fp_del[#fp_del + 1] = it.fp_field
    end
  end
end
-- one command each for the site-wide indexes, not one per object
if #owners > 0 then
  redis.call('HSET', KEYS[2], unpack(owners))
end
if #fp_set > 0 then
  redis.call('HSET', KEYS[3], unpack(fp_set))
end
if #fp_del > 0 then
  redis.call('HDEL', KEYS[3], unpack(fp_del))
end

if min_id ~= '' then
  redis.call('XTRIM', KEYS[1], 'MINID', '~', min_id)
end

-- finished jobs whose hash has expired: drop them from the owner index
local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', math.floor(now_ms / 1000), 'LIMIT', 0, 200)
for _, oid in ipairs(expired) do
  redis.call('HDEL', KEYS[2], oid)
  redis.call('HDEL', KEYS[3], 'job:' .. oid)
  redis.call('ZREM', KEYS[4], oid)
end

return {'ok', events}
