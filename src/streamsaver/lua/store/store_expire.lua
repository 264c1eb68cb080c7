-- TTL upkeep of one bucket, appended as events like every other change.
-- KEYS: mlog mix mitem mns mexp mvec mft mnsz (store/store.lua)   ARGV[2]: 'chain' or '' (shared/common.lua's append_event)
-- ARGV[1]: 0, where shared/common.lua's convention puts the feed's MAXLEN: memory events are not
--          announced on the feeds yet (docs/store.md)
-- ARGV[3]: 'sweep': delete (an mdel event with why 'expired') up to ARGV[4] items whose TTL
--          ran out; returns how many
-- ARGV[3]: 'touch', ARGV[4..]: pairs (member, event id the read saw): restart those items'
--          TTL (an mtouch event each, for items that have one); returns how many
local keys = { KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8] }
local last = tonumber(redis.call('HGET', KEYS[3], 't') or '0')
local now = now_us()
local done = 0

local function append(kind, member, extra)
  if now <= last then
    now = last + 1
  end
  last = now
  local ns, key = split_lp(member)
  local fields = { 'k', kind, 'sv', tostring(STORE_SCHEMA), 'ns', ns, 'key', key,
                   'at', string.format('%d', now) }
  for _, x in ipairs(extra) do
    fields[#fields + 1] = x
  end
  local id = append_event(KEYS[1], fields)
  store_apply(keys, id, fields_of(fields))
  done = done + 1
end

if ARGV[3] == 'sweep' then
  local due = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', math.floor(now / 1000),
                         'LIMIT', 0, tonumber(ARGV[4]))
  for _, member in ipairs(due) do
    local it = item_of(redis.call('HGET', KEYS[3], member))
    append('mdel', member, { 'od', it and it.vd or '', 'why', 'expired' })
  end
elseif ARGV[3] == 'touch' then
  for i = 4, #ARGV, 2 do
    local it = item_of(redis.call('HGET', KEYS[3], ARGV[i]))
    if it and it.ttl > 0 and it.eid == ARGV[i + 1] then
      append('mtouch', ARGV[i], { 'of', it.eid })
    end
  end
end
return done
