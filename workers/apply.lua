-- Apply one batch of changes atomically (see workers/apply.py for the layout).
-- Run with jobtap.contract.epoch.EPOCH_LUA (META and ensure_epoch) and the lease
-- fence (jobtap.contract.lease.FENCE_LUA: fenced) in front.
--
-- The worker made everything already: the hash fields, the event and its JSON,
-- the channels.  This script only checks and writes; it reads three fields of
-- each object and decodes or encodes nothing (every byte handed to a script is
-- hashed by Lua on its way in, so nothing is sent that is not written).
--
-- KEYS[1] site events stream, KEYS[2] owner hash, KEYS[3] fingerprints hash,
-- KEYS[4] expiry zset (before oldest-finished: only drained), KEYS[5] meta
-- hash, KEYS[6] oldest-finished zset (each user's finished set -> when its
-- oldest job ended, ms); then four keys per item: object
-- hash, its index set (user's live jobs, or the node/queue index), its own
-- stream (user's events, or the site stream again for nodes and queues), its
-- owner's finished jobs (a sorted set by when they ended, in Redis' time as the
-- streams' ids; the index again for nodes and queues); then the users' finished
-- sets whose oldest job's hash has expired (the worker read them from
-- oldest-finished: Applier._due_finished), to drain.
--
-- ARGV: cycle, now_ms, site_maxlen, user_maxlen, ttl_s, min_id, all_channel,
-- n_items, the epoch the events were made for, then ensure_epoch's owner flag,
-- new epoch name and time (epoch.py: epoch_args), then publish (PUBLISH, or
-- SPUBLISH on a Redis Cluster: sharded channels, which share the site's slot),
-- then once ('1': a job's event is stored once, in its user's stream, and the
-- site stream names it; '0': both streams hold it), then per item HEADER values
-- (below) and 2*nfields field/value strings, then the chunk's lease generation
-- (the lease fence, jobtap.contract.lease).
--
-- Check first, write after: if the site's epoch is not the one the worker made
-- the events for (a new one began: Redis lost data), or any object's version,
-- epoch and cycle are not the ones the worker read (another worker wrote it,
-- or noted a newer cycle), nothing is written and the worker re-reads and
-- retries.

local now_ms = tonumber(ARGV[2])
local site_maxlen = ARGV[3]
local user_maxlen = ARGV[4]
local ttl = tonumber(ARGV[5])
local min_id = ARGV[6]
local all_channel = ARGV[7]
local n = tonumber(ARGV[8])
local publish = ARGV[14]
local once = ARGV[15] == '1'
local FIRST = 16
local FIRST_KEY = 6
local KEYS_PER_ITEM = 4
-- per item: op, version, epoch, cycle (the three as read; version '' for an
-- object not stored), oid, user, channel, event id, event type, event JSON,
-- fingerprint field, fingerprint value, final, nfields
local HEADER = 14

-- the chunk's lease generation is the last ARGV (the lease fence): a deposed
-- collector's chunk writes nothing
local fence = fenced(KEYS[5], ARGV[#ARGV])
if fence then
  return {'fenced', fence}
end

local now_epoch = ensure_epoch(KEYS[5], tonumber(ARGV[10]), ARGV[11] == '1', ARGV[12], ARGV[13])
if now_epoch[1] ~= ARGV[9] then
  return {'epoch', now_epoch[1]}
end

-- pass 1: check every object against what the worker read
local starts = {}
local pos = FIRST
for i = 1, n do
  local stored = redis.call('HMGET', KEYS[FIRST_KEY + KEYS_PER_ITEM * (i - 1) + 1], 'version', 'epoch', 'cycle')
  local version = ARGV[pos + 1]
  if version == '' then
    if stored[1] then
      return {'conflict', i}
    end
  elseif stored[1] ~= version or (stored[2] or '') ~= ARGV[pos + 2]
      or (stored[3] or '') ~= ARGV[pos + 3] then
    return {'conflict', i}
  end
  starts[i] = pos
  pos = pos + HEADER + 2 * tonumber(ARGV[pos + 13])
end

-- A job's event stored once (jobtap.entries): the site stream's entry names the
-- user's stream, whose entry of the same id holds the event.  The user's stream
-- is trimmed to the site stream's window only (below), so it keeps every entry
-- the site stream names.  False, and nothing written, if the user's stream is
-- ahead of the site's, which only a hand-made entry or a site stream deleted
-- alone can do.  Both return the site stream's id.
local function add_named(stream, eid, etype, json)
  local sid = redis.call('XADD', KEYS[1], 'MAXLEN', '~', site_maxlen, '*',
    'id', eid, 'type', etype, 'stream', stream)
  local added = redis.pcall('XADD', stream, sid, 'id', eid, 'type', etype, 'event', json)
  if type(added) == 'table' and added.err then
    redis.call('XDEL', KEYS[1], sid)
    return false
  end
  return sid
end

-- An event whole in the site stream and, a job's, in its user's: cut there to
-- user_maxlen only where the site stream names none of its entries (copies).
local function add_whole(stream, eid, etype, json)
  local sid = redis.call('XADD', KEYS[1], 'MAXLEN', '~', site_maxlen, '*',
    'id', eid, 'type', etype, 'event', json)
  if stream == KEYS[1] then
    return sid
  end
  if once then
    redis.call('XADD', stream, '*', 'id', eid, 'type', etype, 'event', json)
  else
    redis.call('XADD', stream, 'MAXLEN', '~', user_maxlen, '*', 'id', eid, 'type', etype, 'event', json)
  end
  return sid
end

-- pass 2: write
local events = 0
local touched, user_streams = {}, {}
local fp_set, fp_del, owners = {}, {}, {}
for i = 1, n do
  local p = starts[i]
  local op, oid, etype, nfields = ARGV[p], ARGV[p + 4], ARGV[p + 8], tonumber(ARGV[p + 13])
  local k = FIRST_KEY + KEYS_PER_ITEM * (i - 1)
  local key, set, stream, finished = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  if op == 'remove' then
    redis.call('DEL', key)
    redis.call('SREM', set, oid)
  elseif nfields > 0 then
    redis.call('HSET', key, unpack(ARGV, p + HEADER, p + HEADER + 2 * nfields - 1))
  end
  if etype ~= '' then
    local eid, json = ARGV[p + 7], ARGV[p + 9]
    events = events + 1
    -- a node's or a queue's event is the site stream's own (stream is KEYS[1])
    local sid = once and stream ~= KEYS[1] and add_named(stream, eid, etype, json)
    if not sid then
      sid = add_whole(stream, eid, etype, json)
    end
    if stream ~= KEYS[1] and not touched[stream] then
      touched[stream] = true
      user_streams[#user_streams + 1] = stream
    end
    redis.call(publish, ARGV[p + 6], json)
    redis.call(publish, all_channel, json)
    if op ~= 'remove' then
      local is_new = ARGV[p + 1] == ''
      local user = ARGV[p + 5]
      if is_new and user ~= '' then
        owners[#owners + 1] = oid
        owners[#owners + 1] = user
      end
      if ARGV[p + 12] == '1' then
        redis.call('SREM', set, oid)
        redis.call('EXPIRE', key, ttl)
        if user ~= '' then
          -- scored by its final's own stream id (ms): a reader at a stream
          -- position asks for the jobs that ended at or after it
          local ended_ms = tonumber(string.match(sid, '^%d+'))
          redis.call('ZADD', finished, ended_ms, oid)
          redis.call('ZADD', KEYS[6], 'NX', ended_ms, finished)
        end
      elseif is_new then
        redis.call('SADD', set, oid)
      end
    end
  end
  local fp_field = ARGV[p + 10]
  if fp_field ~= '' then
    local fp_value = ARGV[p + 11]
    if fp_value ~= '' then
      fp_set[#fp_set + 1] = fp_field
      fp_set[#fp_set + 1] = fp_value
    else
      fp_del[#fp_del + 1] = fp_field
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
-- a user's stream keeps nothing older than the site stream's oldest event (which
-- max_age bounds too): the users' streams together then hold at most what the
-- site stream holds, whatever the number of users (user_maxlen alone bounds
-- each, so the sum grew with the users: 2 million events for 200 of them)
if #user_streams > 0 then
  local oldest = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
  if oldest[1] then
    for _, stream in ipairs(user_streams) do
      redis.call('XTRIM', stream, 'MINID', '~', oldest[1][1])
    end
  end
end

-- Finished jobs whose hash has expired (they ended more than the retention
-- ago) leave their user's finished set, the owner index and the fingerprints.
-- The users' finished sets are the one index of finished jobs: oldest-finished
-- says whose oldest job is due, and the set goes with the last job in it.
local cutoff = now_ms - ttl * 1000
for k = FIRST_KEY + KEYS_PER_ITEM * n + 1, #KEYS do
  local finished = KEYS[k]
  local gone = redis.call('ZRANGEBYSCORE', finished, '-inf', '(' .. cutoff, 'LIMIT', 0, 500)
  if #gone > 0 then
    local fps = {}
    for j, oid in ipairs(gone) do
      fps[j] = 'job:' .. oid
    end
    redis.call('HDEL', KEYS[2], unpack(gone))
    redis.call('HDEL', KEYS[3], unpack(fps))
    redis.call('ZREM', finished, unpack(gone))
  end
  local oldest = redis.call('ZRANGE', finished, 0, 0, 'WITHSCORES')
  if oldest[1] then
    redis.call('ZADD', KEYS[6], oldest[2], finished)
  else
    redis.call('ZREM', KEYS[6], finished)
  end
end

-- the jobs of the expiry zset, written before oldest-finished: drained
local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', math.floor(now_ms / 1000), 'LIMIT', 0, 200)
for _, oid in ipairs(expired) do
  redis.call('HDEL', KEYS[2], oid)
  redis.call('HDEL', KEYS[3], 'job:' .. oid)
  redis.call('ZREM', KEYS[4], oid)
end

return {'ok', events}
