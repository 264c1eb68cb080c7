-- delete_thread (and prune with strategy "delete"): drop the thread's log and indexes, record
-- the deletion in the audit stream of the slot, and leave a tombstone, a one-event stream of
-- the same slot that expires after ARGV[2] ms. While it lives, append.lua refuses events that
-- continue the deleted history (a worker still running when its thread was deleted must not
-- bring it back); a fresh start (a put with no parent) clears it.
-- The audit record (docs/audit.md) keeps what the deleted log was, none of its payloads: its
-- event count, last entry id and that entry's chain digest, so an export made before can be
-- matched against it. streamsaver never trims the audit stream.
-- KEYS: log ix ptr feed gone audit   ARGV[1]: thread id   ARGV[2]: tombstone lifetime in ms
-- ARGV[3]: the saver's thread time to live in ms (0: none): the tombstone lives no longer,
-- since the thread it guards would have expired by then anyway
-- Returns the number of keys deleted.
if redis.call('EXISTS', KEYS[1]) == 1 then
  local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
  redis.call('XADD', KEYS[6], '*', 'k', 'thread_deleted', 'sv', tostring(SCHEMA),
             'thread', ARGV[1], 'n', tostring(redis.call('XLEN', KEYS[1])),
             'last', last and last[1] or '', 'head', last and fields_of(last[2]).dg or '')
end
local n = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('SREM', thread_index(KEYS[4]), ARGV[1])
redis.call('DEL', KEYS[5])
redis.call('XADD', KEYS[5], '*', 'k', 'deleted', 'sv', tostring(SCHEMA), 'thread', ARGV[1])
local ttl = tonumber(ARGV[3]) or 0
redis.call('PEXPIRE', KEYS[5], (ttl > 0 and ttl < tonumber(ARGV[2])) and ttl or ARGV[2])
return n
