-- One slot's share of a page of saver.threads(): rows after a position in (activity desc,
-- thread id asc) order. The threads the feed names after the cursor are read from their logs
-- (the projector may not have applied them yet), the rest from the registry.
-- KEYS: feed state registry activity (projector/registry.lua)
-- ARGV: [1] key prefix  [2] rows wanted (0: all)  [3] after this activity ms, or ''
--       [4] and this thread id (with [3])
-- Returns {'fallback'} when the slot's projections cannot be used (or more than PENDING_MAX feed
-- entries wait for the projector), else {'ok' or 'fresh', thread, row,
-- ...}: every pending thread's row after the position, and up to ARGV[2] others.
local prefix, want = ARGV[1], tonumber(ARGV[2])
local after_ms, after_t = tonumber(ARGV[3]), ARGV[4]
local cursor = usable_cursor(KEYS[1], KEYS[2])
local entries = cursor and pending_entries(KEYS[1], cursor)
if not entries then
  return {'fallback'}
end
local function beyond(ms, t)
  return after_ms == nil or ms < after_ms or (ms == after_ms and bytes_lt(after_t, t))
end
-- 'fresh': never seeded; when no slot was, no projector ever ran, and readers scan
local out = {redis.call('EXISTS', KEYS[2]) == 1 and 'ok' or 'fresh'}
local pending, is_pending = named(entries)
for _, t in ipairs(pending) do
  local base = thread_base(prefix, t)
  local row = thread_row(base .. 'log', base .. 'ix', base .. 'ptr')
  if row and beyond(row[3], t) then
    out[#out + 1] = t
    out[#out + 1] = cmsgpack.pack(row)
  end
end
local top, taken, offset = after_ms or '+inf', 0, 0
while want == 0 or taken < want do
  local chunk = redis.call('ZREVRANGEBYSCORE', KEYS[4], top, '-inf', 'WITHSCORES', 'LIMIT',
                           offset, 200)
  if #chunk == 0 then
    break
  end
  offset = offset + #chunk / 2
  for i = 1, #chunk, 2 do
    local t, ms = chunk[i], tonumber(chunk[i + 1])
    -- a thread deleted or expired since its row was written: not listed
    local base = thread_base(prefix, t)
    if not is_pending[t] and beyond(ms, t) and (want == 0 or taken < want)
        and live(base .. 'log', base .. 'ptr') then
      out[#out + 1] = t
      out[#out + 1] = redis.call('HGET', KEYS[3], t)
      taken = taken + 1
    end
  end
end
return out
