-- One slot's candidate threads for a cross-thread read: every thread its projections name
-- for the query, and every thread its feed names after the cursor (not applied yet). The
-- caller reads each candidate exactly, so extra candidates cost time, never correctness.
-- KEYS: feed state registry activity runs meta (projector/registry.lua)
-- ARGV: [1] 'runs': threads holding any of the runs ARGV[2..]
--           'meta': threads with, for every key of ARGV[2], msgpack [key, form, ...] as checkpoint/list.lua
--                   takes it ('' for none), a checkpoint whose metadata has that value (form, as
--                   shared/meta.lua's); with no key, every thread
-- Returns {'fallback'} when the slot's projections cannot be used (or more than PENDING_MAX feed
-- entries wait for the projector), else {'ok' or 'fresh', thread, ...}.
local cursor = usable_cursor(KEYS[1], KEYS[2])
local pending = cursor and pending_entries(KEYS[1], cursor)
if not pending then
  return {'fallback'}
end
local found = {}
local function members(key, head)
  local out = {}
  for _, m in ipairs(redis.call('ZRANGEBYLEX', key, '[' .. head, '[' .. head .. '\255')) do
    out[string.sub(m, #head + 1)] = true
  end
  return out
end
if ARGV[1] == 'runs' then
  for i = 2, #ARGV do
    for t in pairs(members(KEYS[5], 'f' .. lp(ARGV[i]))) do
      found[t] = true
    end
  end
else
  local match = ARGV[2] ~= '' and cmsgpack.unpack(ARGV[2]) or {}
  local first = true
  for i = 1, #match, 2 do
    local these = members(KEYS[6], 'f' .. lp(match[i]) .. lp(indexed_form(match[i + 1])))
    if first then
      found, first = these, false
    else
      for t in pairs(found) do
        if not these[t] then
          found[t] = nil
        end
      end
    end
  end
  if first then
    for _, t in ipairs(redis.call('HKEYS', KEYS[3])) do
      found[t] = true
    end
  end
end
for _, t in ipairs((named(pending))) do
  found[t] = true
end
-- 'fresh': never seeded; when no slot was, no projector ever ran, and readers scan
local out = {redis.call('EXISTS', KEYS[2]) == 1 and 'ok' or 'fresh'}
for t in pairs(found) do
  out[#out + 1] = t
end
return out
