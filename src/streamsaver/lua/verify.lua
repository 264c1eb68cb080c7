-- Check a thread's log and indexes, atomically, so writers cannot slip in between:
--   1. references: every reference an event makes resolves (references() below);
--   2. indexes: replayed into scratch keys, they equal the live ones.
-- KEYS: log ix ptr scratch-ix scratch-ptr (one slot)   ARGV[1]: 'refs' for (1) alone, or ''
-- The scratch keys are deleted before returning.
-- Returns {applied, skipped, line, ...}: "ref <event id> <what it references>" per reference
-- that does not resolve, "<key kind> <what> <member>" per index difference.
local counts = replay_into(KEYS[1], KEYS[4], KEYS[5])
local out = {counts[1], counts[2]}

local ID = '^%d+%-%d+$'

-- Every reference each event of `log` makes, checked against `ptr`, the pointers a replay of
-- that very log projected (so what live indexes hold does not matter here):
--   a checkpoint's channel versions (cv) each resolve to a stored value: a pointer to an
--     existing field, down every append part's base to a whole value, every shared part naming
--     a writes event's field; its own value parts likewise;
--   its parent is a checkpoint of its namespace in the log;
--   a writes event's checkpoint is in the log (writes may precede their checkpoint);
--   a copy's copy_of and origin are well-formed.
-- A log that starts with a prune's tombstone had its head trimmed on purpose: parents and
-- checkpoints of writes may be among what it trimmed. Events replay skips as malformed are not
-- looked into (they are counted as skipped); those skipped for a reference are reported here.
local function references(log, ptr)
  local problems, checkpoints, wanted, memo = {}, {}, {}, {}
  local trimmed = false

  local function report(eid, what)
    problems[#problems + 1] = 'ref ' .. eid .. ' ' .. what
  end

  -- nil when (ns p, channel, version) resolves to a whole value, else why not
  local function resolve(p, channel, version)
    local key = p .. lp(channel) .. version
    local known = memo[key]
    if known ~= nil then
      return known or nil
    end
    local problem
    local ref = redis.call('HGET', ptr, 'b' .. key)
    if not ref then
      problem = 'version ' .. version .. ' has no stored value'
    else
      local eid, field, base = string.match(ref, '^(%S+) (%S+) ?(.*)$')
      local f = entry_fields(log, eid, {})
      if f == nil or f[field] == nil then
        problem = 'version ' .. version .. ' is stored in event ' .. eid .. ', which is missing'
      else
        problem = shared_problem(log, f[field], {})
        if problem then
          problem = 'version ' .. version .. ' is ' .. problem
        elseif base ~= '' then
          problem = resolve(p, channel, base)
        end
      end
    end
    memo[key] = problem or false
    return problem
  end

  local function check_checkpoint_refs(eid, f)
    local nv = checkpoint_shape(f)
    if not nv then
      return
    end
    local p = lp(f.ns)
    local what = 'checkpoint ' .. f.id .. ': channel '
    for i = 1, #nv, 3 do
      local problem = shared_problem(log, f['b' .. ((i - 1) / 3)], {})
      if not problem and nv[i + 2] ~= '' then
        problem = resolve(p, nv[i], nv[i + 2])
      end
      if problem then
        report(eid, what .. nv[i] .. ' version ' .. nv[i + 1] .. ': ' .. problem)
      end
    end
    local cv = cmsgpack.unpack(f.cv)
    for i = 1, #cv, 2 do
      local problem = resolve(p, cv[i], cv[i + 1])
      if problem then
        report(eid, what .. cv[i] .. ' version ' .. cv[i + 1] .. ': ' .. problem)
      end
    end
    if f.parent ~= nil and f.parent ~= '' then
      wanted[#wanted + 1] = {eid, p .. f.parent, 'checkpoint ' .. f.id .. ': its parent ' ..
        f.parent .. ' (ns ' .. f.ns .. ') is not in the log'}
    end
  end

  local start, first = '-', true
  while true do
    local batch = redis.call('XRANGE', log, start, '+', 'COUNT', 500)
    if #batch == 0 then
      break
    end
    for _, e in ipairs(batch) do
      local eid, f = e[1], fields_of(e[2])
      if first then
        trimmed, first = f.k == 'pruned', false
      end
      if f.origin ~= nil and not string.match(f.origin, ID) then
        report(eid, 'origin ' .. f.origin .. ' is not an event id')
      end
      if f.copy_of ~= nil then
        local ok, c = pcall(cmsgpack.unpack, f.copy_of)
        if not ok or type(c) ~= 'table' or type(c[1]) ~= 'string' or type(c[2]) ~= 'string'
            or not string.match(c[2], ID) then
          report(eid, 'copy_of is not [source thread, event id]')
        end
      end
      if f.k == 'checkpoint' then
        if type(f.ns) == 'string' and type(f.id) == 'string' then
          checkpoints[lp(f.ns) .. f.id] = true
        end
        check_checkpoint_refs(eid, f)
      elseif f.k == 'writes' and check_writes(f) then
        wanted[#wanted + 1] = {eid, lp(f.ns) .. f.id, 'writes of checkpoint ' .. f.id ..
          ' (ns ' .. f.ns .. '), which is not in the log'}
      end
    end
    start = '(' .. batch[#batch][1]
  end
  if not trimmed then
    for _, w in ipairs(wanted) do
      if not checkpoints[w[2]] then
        report(w[1], w[3])
      end
    end
  end
  return problems
end

for _, line in ipairs(references(KEYS[1], KEYS[5])) do
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
  compare('ptr', as_set(redis.call('HGETALL', KEYS[3]), 2),
          as_set(redis.call('HGETALL', KEYS[5]), 2))
end
redis.call('DEL', KEYS[4], KEYS[5])
return out
