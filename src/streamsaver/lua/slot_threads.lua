-- The threads whose log exists, from slots' thread indexes (common.lua's notify()): what
-- saver.thread_ids() and the readers without projections list, with no SCAN. Members whose log
-- expired stay until sweep.lua forgets them; they are left out here.
-- KEYS: thread indexes (one on a cluster; every slot's on a standalone server, one call)
-- ARGV: [1] key prefix
-- Returns, per index with live threads, {its position in KEYS, thread, ...}.
local out = {}
for i, key in ipairs(KEYS) do
  local alive = nil
  for _, t in ipairs(redis.call('SMEMBERS', key)) do
    if redis.call('EXISTS', thread_base(ARGV[1], t) .. 'log') == 1 then
      alive = alive or {i}
      alive[#alive + 1] = t
    end
  end
  if alive then
    out[#out + 1] = alive
  end
end
return out
