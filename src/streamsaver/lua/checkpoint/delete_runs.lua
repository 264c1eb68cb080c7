-- delete_for_runs on one thread: the checkpoints of the given runs, their pending writes and
-- every value part only they stored leave the log. The thread is compacted (checkpoint/compact.lua)
-- to every other checkpoint, values they read from the deleted events included, and a "delete"
-- event naming what was deleted (no payloads) is appended last: the log records that, and when,
-- it happened. Appends nothing when the thread has none of the runs' checkpoints.
-- KEYS: log ix ptr feed   ARGV[1]: the feed's MAXLEN   ARGV[2]: 'chain' or '' (shared/common.lua)
-- ARGV[3]: the mode:
--   'check'   one slice of the DeltaChannel check below, newest checkpoints first, from
--             ARGV[5] ('' to start, else the last index member checked) for up to ARGV[6] ms;
--             writes nothing. Returns 0 when the thread has none of the runs' checkpoints, a
--             refusal, or {'more' or 'checked', last member checked, the log's last id};
--   ''        check, record and compact, in this call (what a server out of memory needs:
--             checkpoint/compact.lua frees before it appends), then shrink. Returns the
--             checkpoints deleted.
--   'shrink'  after the slices: a log left with records alone is copied to what they take
--             (shrink() below). Returns 1 if it was.
-- Elsewhere the slices of checkpoint/compact_slice.lua drop the checkpoints and append the record, after
-- the 'check' slices.
-- ARGV[4]: thread id   ARGV[7..]: run ids
-- The thread keeps the time to live it had.
local mode, runs, named = ARGV[3], {}, {}

-- A thread whose every checkpoint went keeps its records alone: a few events, which Redis 7 put
-- in a stream node allocated at stream-node-max-bytes (4 KB, however little they hold). A copy
-- of the log allocates what they take (docs/retention.md, "What a deletion leaves"). Returns 1
-- if it copied, else 0.
local SHRINK_MOST = 16
local function shrink()
  if #redis.call('ZRANGEBYLEX', KEYS[2], '[c', '[c\255', 'LIMIT', 0, 1) > 0 or
      redis.call('XLEN', KEYS[1]) > SHRINK_MOST then
    return 0
  end
  local copy = KEYS[1] .. ':deleting'
  redis.call('UNLINK', copy)
  redis.call('COPY', KEYS[1], copy)
  redis.call('UNLINK', KEYS[1])
  redis.call('RENAME', copy, KEYS[1])
  return 1
end
if mode == 'shrink' then
  return shrink()
end
for i = 7, #ARGV do
  named[ARGV[i]] = true
end

-- A surviving checkpoint's DeltaChannels rebuild from its ancestors' writes back to their seed
-- (checkpoint/delta.lua): dropping such an ancestor would silently empty them. Refused before
-- anything is written, naming the first (run_dependency()).
local cache, memo = {}, {}
local function refusal(m)
  return run_dependency(KEYS[1], KEYS[3], m, named, cache, memo)
end

if mode == 'check' then
  local any = false
  for i = 7, #ARGV do
    local r = '[r' .. lp(ARGV[i])
    any = any or #redis.call('ZRANGEBYLEX', KEYS[2], r, r .. '\255', 'LIMIT', 0, 1) > 0
  end
  if not any then
    return 0
  end
  local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1][1]
  local budget = tonumber(ARGV[6])
  local from = ARGV[5] == '' and '[c\255' or '(' .. ARGV[5]
  units_begin()
  while true do
    -- newest first, so older ones' walks stop where a newer one's went (checkpoint/delta.lua's
    -- memo)
    local page = redis.call('ZREVRANGEBYLEX', KEYS[2], from, '[c', 'LIMIT', 0, 20)
    for _, m in ipairs(page) do
      local refused = refusal(m)
      if refused then
        return refused
      end
      -- a member's walk is the unit: a page of them overran the budget (shared/slice.lua)
      if over(budget) then
        return {'more', m, last}
      end
    end
    if #page < 20 then
      return {'checked', '', last}
    end
    from = '(' .. page[#page]
  end
end

local items = {}
for i = 7, #ARGV do
  local r = 'r' .. lp(ARGV[i])
  local ms = redis.call('ZRANGEBYLEX', KEYS[2], '[' .. r, '[' .. r .. '\255')
  if #ms > 0 then
    runs[#runs + 1] = ARGV[i]
  end
  for _, m in ipairs(ms) do
    local ns, cid = split_lp(string.sub(m, #r + 1))
    items[#items + 1] = ns
    items[#items + 1] = cid
  end
end
if #items == 0 then
  return 0
end
local live = redis.call('ZRANGEBYLEX', KEYS[2], '[c', '[c\255')
for i = #live, 1, -1 do
  local refused = refusal(live[i])
  if refused then
    return refused
  end
end
local ev = deleted_event(ARGV[4], items, runs)
-- projected first, so the compaction keeps every checkpoint but the deleted ones; it projects
-- the event again, with the rest, once appended
local f = fields_of(ev)
apply_delete(KEYS[1], KEYS[2], KEYS[3], '', f, check_delete(f))
compact(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], 0, {ev})
expire_thread(KEYS[1], {KEYS[2], KEYS[3]}, 0)
shrink()
return #items / 2
