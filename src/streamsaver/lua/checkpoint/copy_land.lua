-- copy_thread's last step: the copy, built whole in scratch keys beside the target (the source's
-- events imported by checkpoint/import.lua into them, page by page, from one version of the
-- source's log), becomes the target in one call, so no reader ever sees part of a copy. Then its
-- events are announced in the slot's feed, a page per call within the budget (events appended
-- to the target since announce themselves), as checkpoint/compact_slice.lua announces a
-- compaction's.
-- A target that has a log (a live thread, or a deleted one's thread_deleted event) is left as it
-- is: the caller appends the copy's events to it instead (checkpoint/lifecycle.py).
-- Needs shared/slice.lua and shared/common.lua.
-- KEYS: log ix ptr feed of the target, then the scratch log ix ptr (one slot)
-- ARGV[1]: the feed's MAXLEN   ARGV[2]: 'chain' or '' (shared/common.lua)
-- ARGV[3]: the target's time to live in ms (0: none)   ARGV[4]: ms after which it stops
-- ARGV[5]: 'swap', or 'announce' to go on announcing   ARGV[6]: the last id announced
-- ARGV[7]: the copy's last id (announce)
-- Returns {'exists'} (nothing done), {'more', last id announced, the copy's last id} or {'done'}.
local log, ix, ptr, feed = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local nl, nx, np = KEYS[5], KEYS[6], KEYS[7]
local budget, at, upto = tonumber(ARGV[4]), ARGV[6], ARGV[7]
units_begin()
if ARGV[5] == 'swap' then
  -- (or a deleted thread's mark, which the appends put first: checkpoint/projection.lua's
  -- restore_deleted())
  if redis.call('EXISTS', log) == 1 or redis.call('HEXISTS', ptr, 'd') == 1 then
    return {'exists'}
  end
  local last = redis.call('XREVRANGE', nl, '+', '-', 'COUNT', 1)[1]
  if not last then
    redis.call('UNLINK', nl, nx, np)
    return {'done'}
  end
  upto, at = last[1], ''
  -- indexes left without their log (expired apart, deleted by hand) must not mix in
  redis.call('UNLINK', ix, ptr)
  for _, pair in ipairs({{nl, log}, {nx, ix}, {np, ptr}}) do
    move_in(pair[1], pair[2])
  end
  expire_thread(log, {ix, ptr}, ARGV[3])
end
while true do
  local batch = redis.call('XRANGE', log, at == '' and '-' or '(' .. at, upto, 'COUNT', 20)
  for _, e in ipairs(batch) do
    notify(feed, ARGV[1], e[1], fields_of(e[2]))
    at = e[1]
    if over(budget) then
      return {'more', at, upto}
    end
  end
  if #batch < 20 then
    return {'done'}
  end
end
