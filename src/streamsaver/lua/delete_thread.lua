-- delete_thread (and prune with strategy "delete"): drop the thread's log and indexes, and leave
-- a tombstone, a one-event stream of the same slot that expires after ARGV[2] ms. While it
-- lives, append.lua refuses events that continue the deleted history (a worker still running
-- when its thread was deleted must not bring it back); a fresh start (a put with no parent)
-- clears it.
-- KEYS: log ix ptr feed gone   ARGV[1]: thread id   ARGV[2]: tombstone lifetime in ms
-- Returns the number of keys deleted.
local n = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('DEL', KEYS[5])
redis.call('XADD', KEYS[5], '*', 'k', 'deleted', 'sv', tostring(SCHEMA), 'thread', ARGV[1])
redis.call('PEXPIRE', KEYS[5], ARGV[2])
return n
