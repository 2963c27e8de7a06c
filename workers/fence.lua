-- The lease fence (see collector/lease.py and workers/chunk.py).  This file
-- only defines fenced(): apply.lua is run with it in front, after epoch.lua.
--
-- fenced(meta, generation) -> the site's lease generation if the chunk's
-- generation is below it (the chunk comes from a collector deposed since: it
-- must write nothing), else false.  A chunk without a generation (0: contract
-- version 1) passes only while the site has none; a site without a counter
-- (Redis lost it) takes any chunk.
local function fenced(meta, generation)
  local current = tonumber(redis.call('HGET', meta, 'lease_generation') or '0')
  if (tonumber(generation) or 0) < current then
    return current
  end
  return false
end
