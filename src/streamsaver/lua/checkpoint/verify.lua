-- Check a thread's log and indexes, atomically, so writers cannot slip in between:
--   1. references: every reference an event makes resolves (checkpoint/refs.lua);
--   2. indexes: replayed into scratch keys, they equal the live ones.
-- KEYS: log ix ptr scratch-ix scratch-ptr (one slot)   ARGV[1]: 'refs' for (1) alone, or ''
-- The scratch keys are deleted before returning.
-- Returns {applied, skipped, line, ...}: "ref <event id> <what it references>" per reference
-- that does not resolve, "<key kind> <what> <member>" per index difference.
if only_marked(KEYS[1], KEYS[3]) then
  return {0, 0}
end
local counts = replay_into(KEYS[1], KEYS[4], KEYS[5])
local out = {counts[1], counts[2]}

local problems, checkpoints, wanted = {}, {}, {}
local check = ref_checker(KEYS[1], KEYS[5], function(eid, what)
  problems[#problems + 1] = 'ref ' .. eid .. ' ' .. what
end, function(key)
  checkpoints[key] = true
end, function(key, eid, what)
  wanted[#wanted + 1] = {eid, key, what}
end)
local start, first, trimmed = '-', true, false
while true do
  -- pages of a bounded size: its memory stays what a page holds, whatever the events hold
  local batch = log_page(KEYS[1], start, 500)
  if #batch == 0 then
    break
  end
  for _, e in ipairs(batch) do
    local f = fields_of(e[2])
    if first then
      trimmed, first = f.k == 'pruned', false
    end
    check(e[1], f)
  end
  start = '(' .. batch[#batch][1]
end
if not trimmed then
  for _, w in ipairs(wanted) do
    if not checkpoints[w[2]] then
      problems[#problems + 1] = 'ref ' .. w[1] .. ' ' .. w[3]
    end
  end
end
for _, line in ipairs(problems) do
  out[#out + 1] = line
end

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

if ARGV[1] ~= 'refs' then
  compare('ix', as_set(redis.call('ZRANGE', KEYS[2], 0, -1), 1),
          as_set(redis.call('ZRANGE', KEYS[4], 0, -1), 1))
  local live, rebuilt = as_set(redis.call('HGETALL', KEYS[3]), 2),
      as_set(redis.call('HGETALL', KEYS[5]), 2)
  for k in pairs(rebuilt) do
    if live[k] == nil and not may_lack(k) then
      out[#out + 1] = 'ptr missing ' .. k
    end
  end
  for k, v in pairs(live) do
    local problem = ptr_problem(KEYS[3], KEYS[5], k, v, rebuilt[k])
    if problem then
      out[#out + 1] = 'ptr ' .. problem .. ' ' .. k
    end
  end
end
redis.call('DEL', KEYS[4], KEYS[5])
return out
