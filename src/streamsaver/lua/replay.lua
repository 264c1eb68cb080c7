-- Rebuild a thread's indexes by replaying its whole log through apply().
-- KEYS: log ix ptr   Returns {events applied, events skipped, "<id> <reason>" per skipped event
-- (unknown kind, newer schema, malformed, or an append part whose base or write is not stored)}.
local counts = replay_into(KEYS[1], KEYS[2], KEYS[3])
-- the rebuilt indexes expire with the log
expire_thread(KEYS[1], {KEYS[2], KEYS[3]}, 0)
return counts
