-- Replay a thread's log into scratch keys and compare them with the live indexes, atomically,
-- so writers cannot slip in between. The scratch keys are deleted before returning.
-- KEYS: log ix ptr scratch-ix scratch-ptr (one slot)
-- Returns {applied, skipped, difference, ...}, each difference "<key kind> <what> <member>".
local counts = replay_into(KEYS[1], KEYS[4], KEYS[5])
local out = {counts[1], counts[2]}

local function as_set(flat, step)
  local t = {}
  for i = 1, #flat, step do
    t[flat[i]] = flat[i + step - 1]
  end
  return t
end

local function compare(kind, live, rebuilt)
  for k, v in pairs(rebuilt) do
    if live[k] == nil then
      out[#out + 1] = kind .. ' missing ' .. k
    elseif live[k] ~= v then
      out[#out + 1] = kind .. ' differs ' .. k
    end
  end
  for k in pairs(live) do
    if rebuilt[k] == nil then
      out[#out + 1] = kind .. ' extra ' .. k
    end
  end
end

compare('ix', as_set(redis.call('ZRANGE', KEYS[2], 0, -1), 1),
        as_set(redis.call('ZRANGE', KEYS[4], 0, -1), 1))
compare('ptr', as_set(redis.call('HGETALL', KEYS[3]), 2), as_set(redis.call('HGETALL', KEYS[5]), 2))
redis.call('DEL', KEYS[4], KEYS[5])
return out
