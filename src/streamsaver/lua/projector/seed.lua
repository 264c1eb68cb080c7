-- One slice of a slot's seed: (re)build its projections from its threads' logs, and set its
-- cursor (rebuild --all, a projector's first start, a slot trimmed past its cursor). Cut into
-- calls of a few ms each (shared/slice.lua), so a long log never holds the server, which runs one
-- script at a time, for seconds: one script over a slot of 100,000 events held it 0.53 s.
-- The slices build the rows and members in scratch keys beside the live ones, which readers
-- and projectors go on using; the call that finishes the slot's last thread swaps them in and
-- sets the cursor in the same call. The caller read the feed's last id (ARGV[2]) before
-- listing the slot's threads, so a thread it missed, or an event appended after a thread's
-- slices read its log, is after that id: the projector applies it from the feed (applying an
-- entry twice changes nothing, projector/registry.lua).
-- KEYS: feed state registry activity runs meta (projector/registry.lua), then the scratch registry,
-- activity, runs and meta, and the seed's state (checkpoint/projections.py's seed_keys(); one slot)
-- ARGV: [1] key prefix  [2] the cursor to set  [3] this seed's token  [4] 's' in its first
--   call (earlier scratch keys dropped), 'l' when ARGV[7..] are the slot's last threads, 'u'
--   (with 's') to leave a slot that has a cursor, or none  [5] ms after which it stops
--   [6] the first thread's place: '' not begun, else '<from> <upto>': the last event of its log indexed ('-' none yet) and its log's last event
--   when its row was made, where its slices stop: what comes after is after the cursor, and
--   the projector applies it (a seed that chased the end of a log written faster than it
--   reads never finished)  [7..] threads, in order
-- Returns {'more', threads finished, the next one's place}, {'done', threads with a row}, or
-- {'lost'}: another seed of the slot began since (its token), and finishes it.
local reg, act, runs, meta, st = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local prefix, token, budget = ARGV[1], ARGV[3], tonumber(ARGV[5])
if string.find(ARGV[4], 'u', 1, true) and redis.call('HEXISTS', KEYS[2], 'cursor') == 1 then
  -- seeded already (by a projector replica started at the same time, which applies entries
  -- after it now): another seed would move the cursor back
  return {'done', redis.call('HLEN', KEYS[3])}
elseif string.find(ARGV[4], 's', 1, true) then
  -- an abandoned seed's scratch keys may be large: freed in the background
  redis.call('UNLINK', reg, act, runs, meta)
  redis.call('HSET', st, 'token', token)
elseif redis.call('HGET', st, 'token') ~= token then
  return {'lost'}
end

-- projector/registry.lua's key positions, the scratch ones in place of the live ones
local scratch = {KEYS[1], KEYS[2], reg, act, runs, meta}
local acc, place, finished, units = {}, ARGV[6], 0, 0
local PAGE = 20
units_begin()
for i = 7, #ARGV do
  if units > 0 and over(budget) then
    break
  end
  local t = ARGV[i]
  local base = thread_base(prefix, t)
  local log = base .. 'log'
  local done, from, upto = false, string.match(place, '^(%S+) (%S+)$')
  if place == '' then
    local row, last = thread_row(log, base .. 'ix', base .. 'ptr')
    set_row(reg, act, t, row)
    units = units + 1
    from, upto, done = '-', last, row == nil
  end
  while not done and not (units > 0 and over(budget)) do
    local batch, asked = log_page(log, from == '-' and '-' or '(' .. from, PAGE, upto)
    -- a page's read is not a unit: counted in one, it made every event look as long
    units_begin()
    for _, e in ipairs(batch) do
      index_event(acc, scratch, t, fields_of(e[2]))
      from, units = e[1], units + 1
      if over(budget) then
        break
      end
    end
    done = #batch < asked and (#batch == 0 or from == batch[#batch][1])
  end
  if not done then
    place = from .. ' ' .. upto
    break
  end
  finished, place = finished + 1, ''
end
add_members(acc)

if string.find(ARGV[4], 'l', 1, true) and finished == #ARGV - 6 then
  for j = 3, 6 do
    -- RENAME would free the old key in this call; UNLINK frees it in the background
    redis.call('UNLINK', KEYS[j])
    move_in(scratch[j], KEYS[j])
  end
  redis.call('DEL', st)
  local now = redis.call('TIME')
  redis.call('HSET', KEYS[2], 'cursor', ARGV[2], 'at',
             now[1] * 1000 + math.floor(now[2] / 1000), 'meta_form', META_FORM)
  return {'done', redis.call('HLEN', KEYS[3])}
end
save_slice(st, {token = token}, {reg, act, runs, meta})
-- while it exists projectors leave the slot (projector/project.lua): a seed abandoned half-way
-- holds them back for seconds, not the hour its scratch keys stay
redis.call('PEXPIRE', st, 30000)
return {'more', finished, place}
