-- Rebuild a thread's indexes by replaying its whole log through apply().
-- KEYS: log ix ptr threads (the slot's thread index, shared/common.lua)   ARGV[1]: the thread id
-- Returns {events applied, events skipped, "<id> <reason>" per skipped event
-- (unknown kind, newer schema, malformed, or an append part whose base or write is not stored)}.
if only_marked(KEYS[1], KEYS[3]) then
  return {0, 0}
end
local counts = replay_into(KEYS[1], KEYS[2], KEYS[3])
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('SADD', KEYS[4], ARGV[1])
end
-- the rebuilt indexes expire with the log
expire_thread(KEYS[1], {KEYS[2], KEYS[3]}, 0)
return counts
