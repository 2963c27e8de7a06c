-- The site epoch (see epoch.py).  This file only defines ensure_epoch: the
-- workers' apply.lua is run with it in front, and epoch.py runs it on its own.
-- META (the meta hash's field names) comes from meta.py's lua_prelude().
--
-- ensure_epoch(meta, seen, owner, token, at) -> {epoch, cause, cycle}
--
--   meta   the site's meta hash (it holds epoch, epoch_run_id and cycle)
--   seen   a cycle number the caller knows Redis had counted (a chunk's cycle,
--          the collector's own last cycle); 0 for none
--   owner  true for the collector, which owns the cycle counter
--   token  the new epoch's name, used only if a new epoch begins
--   at     the time, as text, for epoch_began_at
--
-- A new epoch begins when Redis' state for the site is not the continuation of
-- what was written before:
--   'empty'    no epoch: Redis came back empty (or never had the site);
--   'restart'  this server is not the one the epoch began on (run_id changed):
--              a restart or a failover, after which the last writes may be gone;
--   'behind'   meta counts fewer cycles than one already seen outside Redis:
--              Redis came back from an older snapshot.
-- Returned: the epoch now in force, the cause ('' if none began) and meta's
-- cycle after the check.
local function ensure_epoch(meta, seen, owner, token, at)
  local cur = redis.call('HMGET', meta, META.EPOCH, META.EPOCH_RUN_ID, META.CYCLE)
  local run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')
  local stored = cur[3] and tonumber(cur[3]) or nil
  local cause = ''
  if not cur[1] then
    cause = 'empty'
  elseif cur[2] ~= run_id then
    cause = 'restart'
  elseif stored and stored < seen then
    cause = 'behind'
  end
  local epoch = cur[1]
  if cause ~= '' then
    epoch = token
    redis.call('HSET', meta, META.EPOCH, epoch, META.EPOCH_RUN_ID, run_id, META.EPOCH_BEGAN_AT, at,
      META.EPOCH_CAUSE, cause, META.EPOCH_PREVIOUS, cur[1] or '')
    redis.call('HINCRBY', meta, META.EPOCHS, 1)
  end
  -- The collector raises the counter to its own last cycle (so that no chunk it
  -- ships is ever ahead of meta); a worker only when it began an epoch and meta
  -- counts cycles but fewer than its chunk's ('behind', or a 'restart' onto an
  -- older snapshot: left behind, the next write would begin yet another epoch).
  -- Where no collector counts cycles (stored nil), a worker never starts the count.
  if seen > 0 and (stored == nil or stored < seen)
      and (owner or (cause ~= '' and stored ~= nil)) then
    redis.call('HSET', meta, META.CYCLE, seen)
    stored = seen
  end
  return {epoch, cause, stored or 0}
end
