-- One slice of verify (checkpoint/verify.lua's work cut into calls of a few ms each), so checking a
-- long log never holds the server for seconds. In order, each phase going on from a cursor:
--   replay  the log into scratch keys, as checkpoint/replay_slice.lua does; every later slice first
--           replays what writers appended since, so the scratch keys follow the live ones;
--   refs    every reference each event makes (checkpoint/refs.lua), against the replayed pointers; what
--           a writes event or a parent wants from later in the log waits in a pending hash;
--   ix, ix missing, ptr, ptr missing (unless ARGV[1] is 'refs'): the live indexes and the
--           scratch ones compared a page at a time, both caught up with the log first, so
--           each page compares the two at one moment.
-- A log rewritten under the slices (a compaction, a deletion) or scratch keys gone starts
-- again. The last slice deletes the scratch keys.
-- KEYS: log ix ptr scratch-ix scratch-ptr state pending seen (core.keys.verify_keys; one slot)
-- ARGV[1]: 'refs' for the references alone, or ''   ARGV[2]: the verification's token
-- ARGV[3]: 'start' for its first slice, else ''   ARGV[4]: most units of work in this call
-- ARGV[5]: ms after which it stops
-- Returns {'more' or 'done', 1 if it (re)started from the beginning else 0, events applied,
-- events skipped, line, ...}: the lines checkpoint/verify.lua gives, of this slice (a page of HSCAN
-- may name a field twice: the caller keeps each line once).
local log, ix, ptr, sx, sp, st, pend, seen = unpack(KEYS)
local most, budget = tonumber(ARGV[4]), tonumber(ARGV[5])
if only_marked(log, ptr) then
  redis.call('UNLINK', sx, sp, st, pend, seen)
  return {'done', 1, 0, 0}
end

local first = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)[1]
local first_id = first and first[1] or ''
local s = {}
do
  local raw = redis.call('HGETALL', st)
  for i = 1, #raw, 2 do
    s[raw[i]] = raw[i + 1]
  end
end
local fresh = 0
-- A rewrite (a compaction, a deletion) starts the log with another entry; an entry removed by
-- hand shortens it. The cursor's own entry is not read to see that it is still there: it may
-- be a pruned checkpoint holding a whole conversation, read again by every slice (1 ms each
-- at 600 steps of 1 KB, four times a slice's budget).
local length = redis.call('XLEN', log)
if ARGV[3] ~= 'start' then
  if s.token ~= ARGV[2] or s.first ~= first_id or length < (tonumber(s.n) or 0) then
    s = {}
  end
end
if s.token == nil then
  fresh = 1
  redis.call('UNLINK', sx, sp, st, pend, seen)
  s = {token = ARGV[2], first = first_id, at = '', phase = 'replay', pc = '',
       trimmed = first and fields_of(first[2]).k == 'pruned' and '1' or ''}
end

local out = {'more', fresh, 0, 0}
local units = 0
local function spent()
  units = units + 1
  return units >= most or over(budget)
end

-- replay what the scratch keys lack; true once they hold the whole log
local function catch_up()
  sink = buffered(true)
  local n = 0
  local done = replay_range(log, sx, sp, s.at == '' and '-' or '(' .. s.at, 10, out, 3, nil,
    function(id)
      s.at = id
      n = n + 1
      -- a unit of work is a read of ten entries
      return over(budget) or (n % 10 == 0 and spent())
    end)
  sink.flush({[sx] = true})
  sink = direct
  return done
end

local function report(eid, what)
  out[#out + 1] = 'ref ' .. eid .. ' ' .. what
end
local check = ref_checker(log, sp, report, function(key)
  redis.call('SADD', seen, key)
  redis.call('HDEL', pend, key)
end, function(key, eid, what)
  if redis.call('SISMEMBER', seen, key) == 0 then
    local waiting = redis.call('HGET', pend, key)
    local list = waiting and cmsgpack.unpack(waiting) or {}
    list[#list + 1] = eid
    list[#list + 1] = what
    redis.call('HSET', pend, key, cmsgpack.pack(list))
  end
end)

local COMPARE = {
  -- phase: the key paged, the other, the line's kind and word when the other lacks a member
  ix = {ix, sx, 'ix extra ', 'ix missing', true},
  ['ix missing'] = {sx, ix, 'ix missing ', 'ptr', true},
  ptr = {ptr, sp, 'ptr extra ', 'ptr missing', false},
  ['ptr missing'] = {sp, ptr, 'ptr missing ', 'done', false},
}

local function step()
  if s.phase == 'refs' then
    local batch, asked = log_page(log, s.pc == '' and '-' or '(' .. s.pc, 10)
    for _, e in ipairs(batch) do
      check(e[1], fields_of(e[2]))
      s.pc = e[1]
      if over(budget) then
        return
      end
    end
    if #batch < asked then
      if s.trimmed == '' then
        local waiting = redis.call('HGETALL', pend)
        for i = 2, #waiting, 2 do
          local list = cmsgpack.unpack(waiting[i])
          for j = 1, #list, 2 do
            report(list[j], list[j + 1])
          end
        end
      end
      s.phase, s.pc = ARGV[1] == 'refs' and 'done' or 'ix', ''
    end
    return
  end
  local c = COMPARE[s.phase]
  local this, other, kind, next_phase, zset = c[1], c[2], c[3], c[4], c[5]
  local more
  if zset then
    local page = redis.call('ZRANGEBYLEX', this, s.pc == '' and '-' or '(' .. s.pc, '+', 'LIMIT', 0, 100)
    for _, m in ipairs(page) do
      if not redis.call('ZSCORE', other, m) then
        out[#out + 1] = kind .. m
      end
      if over(budget) then
        s.pc = m
        return
      end
    end
    more = #page == 100 and page[#page]
  else
    -- a page is one unit (a cursor cannot resume inside it): small enough to cost a fraction
    -- of a slice
    local r = redis.call('HSCAN', this, s.pc == '' and '0' or s.pc, 'COUNT', 20)
    for i = 1, #r[2], 2 do
      local k, v = r[2][i], r[2][i + 1]
      local theirs = redis.call('HGET', other, k) or nil
      if this == ptr then
        local problem = ptr_problem(ptr, sp, k, v, theirs)
        if problem then
          out[#out + 1] = 'ptr ' .. problem .. ' ' .. k
        end
      elseif not theirs and not may_lack(k) then
        out[#out + 1] = kind .. k
      end
    end
    more = r[1] ~= '0' and r[1]
  end
  if more then
    s.pc = more
  else
    s.phase, s.pc = next_phase, ''
  end
end

local going = true
units_begin()
while going do
  local caught = catch_up()
  if s.phase == 'replay' then
    if caught then
      s.phase = 'refs'
    end
  elseif caught then
    step()
  end
  going = s.phase ~= 'done' and not spent()
end

if s.phase == 'done' then
  out[1] = 'done'
  redis.call('UNLINK', sx, sp, st, pend, seen)
  return out
end
s.n = redis.call('XLEN', log)
save_slice(st, s, {sx, sp, st, pend, seen})
return out
