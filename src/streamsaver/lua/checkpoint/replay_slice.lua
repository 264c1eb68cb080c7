-- One slice of a thread's rebuild: checkpoint/replay.lua's work cut into calls of a few ms each, so
-- a long log never holds the server (which runs one script at a time) for seconds.
-- The slices replay the log into scratch keys, in order; writers meanwhile project onto the
-- live keys as always. The slice that reaches the log's end swaps the scratch keys in within
-- the same call: nothing can be appended between its last XRANGE and the swap, so no write
-- is lost, and the result is what one checkpoint/replay.lua call would have given at that moment.
-- A log rewritten under the slices (a compaction or a deletion removed entries already
-- replayed) or scratch keys gone (expired, another rebuild) start the replay again.
-- KEYS: log ix ptr scratch-ix scratch-ptr scratch-state (one slot)
-- ARGV[1]: '' to start, else the id of the last event the previous slice applied
-- ARGV[2]: most events applied in this call   ARGV[3]: ms after which it stops (after an event)
-- Returns {'more' or 'done', last event id applied, 1 if it started from the log's first
-- event (earlier slices' counts no longer count) else 0, applied, skipped, "<id> <reason>" per
-- event skipped (at most 100)}.
local log, ix, ptr, sx, sp, st = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local most, budget = tonumber(ARGV[2]), tonumber(ARGV[3])
if only_marked(log, ptr) then
  redis.call('UNLINK', sx, sp, st)
  return {'done', ARGV[1], 1, 0, 0}
end

local first_id = first_entry_id(log)
local start, fresh = '-', 1
if ARGV[1] ~= '' then
  local state = redis.call('HMGET', st, 'at', 'first', 'n')
  -- every entry up to the cursor still there: only appends happened since (XADD never inserts
  -- before the last id); a trim or a rewrite removes the first entry, a deletion by hand
  -- shortens the log (the cursor's entry is not read again: it may be large, and each slice
  -- read it)
  if state[1] == ARGV[1] and state[2] == first_id and
      redis.call('XLEN', log) >= (tonumber(state[3]) or 0) then
    start, fresh = '(' .. ARGV[1], 0
  end
end
if fresh == 1 then
  -- an abandoned rebuild's scratch keys may be large: freed in the background
  redis.call('UNLINK', sx, sp, st)
end

local out = {'more', ARGV[1], fresh, 0, 0}
-- a fresh start's scratch keys are empty: no read needs to fall through to them
sink = buffered(fresh == 0)
units_begin()
local done, last = replay_range(log, sx, sp, start, 10, out, 4, 105, function()
  return out[4] + out[5] >= most or over(budget)
end)
sink.flush({[sx] = true})
sink = direct

if not done then
  out[2] = last
  save_slice(st, {at = last, first = first_id, n = redis.call('XLEN', log)}, {sx, sp, st})
  return out
end
out[1], out[2] = 'done', last or ARGV[1]
for _, pair in ipairs({{sx, ix}, {sp, ptr}}) do
  -- RENAME would free the old index in this call; UNLINK frees it in the background
  redis.call('UNLINK', pair[2])
  -- the rebuilt indexes follow the log's expiry, not the scratch key's
  move_in(pair[1], pair[2])
end
redis.call('DEL', st)
expire_thread(log, {ix, ptr}, 0)
return out
