-- One slice of a slot's seed: (re)build its projections from its threads' logs, and set its
-- cursor (rebuild --all, a projector's first start, a slot trimmed past its cursor). Cut into
-- calls of a few ms each (slice.lua), so a long log never holds the server, which runs one
-- script at a time, for seconds: one script over a slot of 100,000 events held it 0.53 s.
-- The slices build the rows and members in scratch keys beside the live ones, which readers
-- and projectors go on using; the call that finishes the slot's last thread swaps them in and
-- sets the cursor in the same call. The caller read the feed's last id (ARGV[2]) before
-- listing the slot's threads, so a thread it missed, or an event appended after a thread's
-- slices read its log, is after that id: the projector applies it from the feed (applying an
-- entry twice changes nothing, registry.lua).
-- KEYS: feed state registry activity runs meta (registry.lua), then the scratch registry,
-- activity, runs and meta, and the seed's state (_projection.py's SeedKeys; one slot)
-- ARGV: [1] key prefix  [2] the cursor to set  [3] this seed's token  [4] 's' in its first
--   call (earlier scratch keys dropped), 'l' when ARGV[7..] are the slot's last threads, both,
--   or ''  [5] ms after which it stops  [6] the first thread's place: '' not begun, '-' its
--   row made, else the last event of its log indexed  [7..] threads, in order
-- Returns {'more', threads finished, the next one's place}, {'done', threads with a row}, or
-- {'lost'}: another seed of the slot began since (its token), and finishes it.
local reg, act, runs, meta, st = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local prefix, token, budget = ARGV[1], ARGV[3], tonumber(ARGV[5])
if string.find(ARGV[4], 's', 1, true) then
  -- an abandoned seed's scratch keys may be large: freed in the background
  redis.call('UNLINK', reg, act, runs, meta)
  redis.call('HSET', st, 'token', token)
elseif redis.call('HGET', st, 'token') ~= token then
  return {'lost'}
end

-- registry.lua's key positions, the scratch ones in place of the live ones
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
  local done = false
  if place == '' then
    local row = thread_row(log, base .. 'ix', base .. 'ptr')
    set_row(reg, act, t, row)
    units = units + 1
    place, done = '-', row == nil
  end
  while not done and not (units > 0 and over(budget)) do
    local batch = redis.call('XRANGE', log, place == '-' and '-' or '(' .. place, '+',
                             'COUNT', PAGE)
    for _, e in ipairs(batch) do
      index_event(acc, scratch, t, fields_of(e[2]))
      place, units = e[1], units + 1
      if over(budget) then
        break
      end
    end
    done = #batch < PAGE and (#batch == 0 or place == batch[#batch][1])
  end
  if not done then
    break
  end
  finished, place = finished + 1, ''
end
add_members(acc)

if string.find(ARGV[4], 'l', 1, true) and finished == #ARGV - 6 then
  for j = 3, 6 do
    -- RENAME would free the old key in this call; UNLINK frees it in the background
    redis.call('UNLINK', KEYS[j])
    if redis.call('EXISTS', scratch[j]) == 1 then
      redis.call('RENAME', scratch[j], KEYS[j])
      redis.call('PERSIST', KEYS[j])
    end
  end
  redis.call('DEL', st)
  local now = redis.call('TIME')
  redis.call('HSET', KEYS[2], 'cursor', ARGV[2], 'at',
             now[1] * 1000 + math.floor(now[2] / 1000), 'meta_form', META_FORM)
  return {'done', redis.call('HLEN', KEYS[3])}
end
save_slice(st, {token = token}, {reg, act, runs, meta, st})
return {'more', finished, place}
