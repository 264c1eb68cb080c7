-- The threads of one slot whose log exists, from the slot's thread index (common.lua's
-- notify()): what saver.thread_ids() and the readers without projections list, with no SCAN.
-- Members whose log expired stay until sweep.lua forgets them; they are left out here.
-- KEYS: the slot's thread index   ARGV: [1] key prefix
local out = {}
for _, t in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', thread_base(ARGV[1], t) .. 'log') == 1 then
    out[#out + 1] = t
  end
end
return out
