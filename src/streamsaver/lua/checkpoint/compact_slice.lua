-- One slice of a compaction (checkpoint/compact.lua's work cut into calls of a few ms each), so a
-- long log never holds the server, which runs one script at a time, for seconds.
-- The slices build the compacted log beside the live one: a new stream, with its own indexes,
-- filled with what checkpoint/compact.lua would append (the 'pruned' tombstone, the records, the
-- kept checkpoints each with its pending writes, the early writes) while writers go on appending
-- to the live log. The slice that has copied every event appended since (the tail) swaps the
-- new keys in within the same call, and the old ones are UNLINKed (freed in the background):
-- no reader, tailer or audit ever sees a half-compacted log, and no write is lost. Then its
-- events are announced in the slot's feed, a page per unit of work (as checkpoint/compact.lua
-- announces its copies; events appended after the swap have announced themselves, so in the feed a
-- copy may come after them).
-- What it gives is what checkpoint/compact.lua run when the first slice ran gives, followed by the
-- events appended since, each copied after the kept ones (checkpoints made self-contained, as
-- checkpoint_copy() makes the kept ones); a kept checkpoint whose values' chains are long comes
-- as several copies of it, its parts first (chained() below), so no call copies a whole
-- conversation. A log rewritten under the slices (another compaction, a deletion,
-- delete_for_runs' record) or state gone starts the compaction again.
-- Needs shared/common.lua, checkpoint/projection.lua, checkpoint/read.lua, checkpoint/delta.lua and
-- checkpoint/compact.lua.
-- KEYS: log ix ptr feed, then new-log new-ix new-ptr state plan (core.keys.compact_keys; one slot)
-- ARGV[1]: the feed's MAXLEN   ARGV[2]: 'chain' or '' (shared/common.lua)
-- ARGV[3]: checkpoints kept per namespace (0: every live one)   ARGV[4]: the compaction's token
-- ARGV[5]: 'start' for its first slice (one unit of work), else ''
-- ARGV[6]: most units of work in this call
-- ARGV[7]: ms after which it stops
-- delete_for_runs (ARGV[3] 0) adds ARGV[8]: the log's last id when its DeltaChannel check
-- (checkpoint/delete_runs.lua's 'check' slices) began, ARGV[9]: the thread id, ARGV[10..]: the
-- runs. The runs' checkpoints and their writes are not copied, and after the kept ones come
-- 'delete' records naming them (a page each), as checkpoint/delete_runs.lua's one script appends
-- one: they are gone for readers when the new log is swapped in, not before, and a writer still
-- continuing one of them in the meantime is refused from then on. A kept checkpoint put since
-- the check began whose DeltaChannels read a dropped one's writes is refused: the scratch
-- keys are dropped and nothing was written (checkpoint/delete_runs.lua's refusal).
-- Returns {'more' or 'done', 1 if it (re)started from the beginning else 0, entries removed,
-- checkpoints deleted, and for 'more' the phase it stopped in and, in the 'tail' phase (copying
-- what writers appended since the first slice), how many ms behind them it is: the caller gives
-- tail calls that do not gain on the writers more budget and no pause (checkpoint/compaction.py)},
-- or a refusal.
local log, ix, ptr, feed = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local nl, nx, np, st, plan = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local keep, token, most, budget = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[6]), tonumber(ARGV[7])
local deleting, named, run_no, checked = #ARGV >= 10, {}, {}, ARGV[8]
for i = 10, #ARGV do
  named[ARGV[i]] = true
  run_no[ARGV[i]] = string.format('%04d', i - 10)
end
-- a 'delete' record names at most this many checkpoints: its projection, 15-35 us each, is one
-- unit of work, within a 0.25 ms slice (200 a record held the server 3-7 ms at 200,000 events,
-- benchmarks.stall; 20 held it 0.7 ms at 30,000)
local DROP_PAGE = 6

local function last_id(key)
  local e = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)[1]
  return e and e[1] or nil
end

-- plan members sort as the copies go: records, then checkpoints, each by event id
local function by_id(kind, eid, member)
  local ms, seq = string.match(eid, '^(%d+)-(%d+)$')
  return kind .. string.rep('0', 20 - #ms) .. ms .. string.rep('0', 20 - #seq) .. seq ..
    (member or '')
end

local FIELDS = {'token', 'phase', 'first', 'base', 'pc', 'tomb', 'h', 'removed', 'last', 'deleted',
                'walk', 'head_of', 'head'}
local s = {}
do
  local raw = redis.call('HMGET', st, unpack(FIELDS))
  for i, name in ipairs(FIELDS) do
    s[name] = raw[i] or nil
  end
end
local fresh = 0
if ARGV[5] ~= 'start' then
  -- A server out of memory refuses a slice's writes (the first decides for the whole call),
  -- and the caller, which sends this slice alone, would raise: it gets a value instead, and
  -- compacts in one script, which frees first
  local probe = redis.pcall('HSET', st, 'token', s.token or '')
  if type(probe) == 'table' and probe.err then
    return {'oom', probe.err}
  end
  -- the same first entry: only appends since (a compaction or a deletion rewrites the log
  -- from its first entry on)
  if s.token ~= token or s.first ~= first_entry_id(log) then
    if s.phase == 'announce' then
      -- swapped in, then rewritten again: what rewrote it announces its own events
      redis.call('UNLINK', st)
      return {'done', 0, tonumber(s.removed), tonumber(s.deleted)}
    end
    s = {}
  end
end
if s.token == nil then
  fresh = 1
  -- first a write that may grow memory, which a full server refuses before anything is written
  -- (a script that freed first could go on); then an abandoned compaction's keys, maybe large,
  -- are freed in the background
  redis.call('HSET', st, 'token', '')
  redis.call('UNLINK', nl, nx, np, plan)
  local base = last_id(log)
  if not base then
    return {'done', fresh, 0, 0}
  end
  s = {token = token, phase = 'records', first = first_entry_id(log), base = base, pc = '',
       tomb = cmsgpack.pack(pruned_event(log)), h = chain_head(log), last = '', deleted = '0',
       -- written, so what an abandoned compaction left in st is not read back
       walk = '', head_of = '', head = ''}
end
local base = s.base

heads[nl] = s.h
local cache = {}
-- what a copy need not store again: a value some copy already holds, i.e. its pointer
local provided = setmetatable({}, {__index = function(_, k)
  return redis.call('HEXISTS', np, 'b' .. k) == 1
end})

-- Append a copy to the new log, the tombstone first. Its ids sort after every live id it
-- copies or follows (`after`), so a reader's cursor on the old log only goes on in the new.
-- Ids are compared as strings the state holds: reading the live log's last entry to learn its
-- id would copy it whole, maybe megabytes (delete_for_runs' record), on every call.
local function emit(ev, after)
  if s.last == '' then
    local tomb, id = cmsgpack.unpack(s.tomb), nil
    local now = redis.call('TIME')
    local ms, seq = string.match(s.base, '^(%d+)-(%d+)$')
    if tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) <= tonumber(ms) then
      id = ms .. '-' .. (tonumber(seq) + 1)
    end
    s.last = append_event(nl, tomb, id)
    apply(nl, nx, np, s.last, fields_of(tomb))
  end
  if after and id_less(s.last, after) then
    redis.call('XSETID', nl, after)
  end
  s.last = append_event(nl, ev)
  apply(nl, nx, np, s.last, fields_of(ev))
end

local function emit_all(events)
  for _, ev in ipairs(events) do
    emit(ev)
  end
end

-- delete_for_runs: the checkpoints named by plan members m ('3' or '4', the run's number,
-- lp(ns), id) leave in one 'delete' record, as checkpoint/delete_runs.lua's names them (by run,
-- then ns)
local function emit_deleted(members)
  if #members == 0 then
    return
  end
  local items, runs, last = {}, {}, nil
  for _, m in ipairs(members) do
    local i = tonumber(string.sub(m, 2, 5))
    local ns, id = split_lp(string.sub(m, 6))
    items[#items + 1] = ns
    items[#items + 1] = id
    if i ~= last then
      runs[#runs + 1], last = ARGV[10 + i], i
    end
  end
  emit(deleted_event(ARGV[9], items, runs))
  s.deleted = tostring(tonumber(s.deleted) + #members)
end

-- Refused (run_dependency() in checkpoint/delta.lua): what the caller gets back, instead of a swap.
local refused, memo = nil, {}
local function dependency(f)
  refused = refused or run_dependency(log, ptr, 'c' .. lp(f.ns) .. f.id, named, cache, memo)
  return refused ~= nil
end

-- What the tail does with an event appended since the first slice: its kind, or 'dropped' for
-- delete_for_runs' (a named run's checkpoint, named by a record at the swap, or the writes of a
-- checkpoint live in the old log and not copied to the new one)
local function tail_kind(f)
  local m = lp(f.ns or '') .. (f.id or '')
  if deleting and f.k == 'checkpoint' and named[f.run or ''] then
    redis.call('ZADD', plan, 0, '4' .. run_no[f.run] .. m)
    return 'dropped'
  elseif deleting and f.k == 'writes' and redis.call('HEXISTS', ptr, 'c' .. m) == 1 and
      not redis.call('ZSCORE', nx, 'c' .. m) then
    return 'dropped'
  end
  return f.k
end

-- A kept checkpoint whose copy would hold more than about COPY_BYTES (a pruned conversation's
-- whole chain: one unit copied 850 KB in 20 ms) is copied as the log first stored it: its
-- parts, oldest first, a copy of about COPY_BYTES or a few slices' budget per unit
-- (compact.lua's chain_copy()), then itself. The chain is walked (compact.lua's walk_links())
-- within the budget too, over several units if need be (s.walk: where it stopped); the links
-- walked but not copied yet wait in the plan as '6' members, in order (a position, then the
-- link as msgpack), so no unit walks the chain again or holds more than a copy's worth of it.
-- One part is still one unit: a snapshot of megabytes, one value a put stored, is copied in
-- one call.
-- True when this unit walked or copied a part (the checkpoint comes again in the next one);
-- false when what is left fits its own copy.
local CHAINED = math.floor(COPY_BYTES / FIELD_BYTES) + 1
-- a few slices' budget: a part of ~1 KB costs ~30 us to read and copy, and a copy per slice
-- made 52 copies of one checkpoint pruned from 260 steps of 2 KB messages
local function spent()
  return elapsed_ms() >= 4 * budget
end

local function queue(links, position)
  local members = {}
  for i, l in ipairs(links) do
    members[#members + 1] = 0
    members[#members + 1] = '6' .. position(i, l) ..
      cmsgpack.pack({l[#l - 3], l[#l - 2], l[#l - 1], l[#l]})
    if #members >= 1000 or i == #links then
      redis.call('ZADD', plan, unpack(members))
      members = {}
    end
  end
end

local function chained(eid, f)
  local at = (s.walk or '') ~= '' and cmsgpack.unpack(s.walk) or nil
  local queued = at == nil and redis.call('ZRANGEBYLEX', plan, '[6', '(7', 'LIMIT', 0, CHAINED)
  local links
  if at or #queued == 0 then
    local walked, stopped = walk_links(ptr, f, provided, at, spent)
    if stopped or at or (#walked > 0 and spent()) then
      -- walked over several units, or the walk spent this one's budget: by need, then oldest
      -- first (a unit reads at least one part, maybe a snapshot of megabytes)
      queue(walked, function(_, l) return string.format('%04d%07d', l[1], 9999999 - l[2]) end)
      s.walk = stopped and cmsgpack.pack(stopped) or ''
      return true
    end
    links = oldest_first(walked)
  else
    links = {}
    for _, m in ipairs(queued) do
      for _, x in ipairs(cmsgpack.unpack(string.sub(m, 13))) do
        links[#links + 1] = x
      end
    end
  end
  local copy, used = chain_copy(log, eid, f, cache, provided, links, spent)
  if queued and #queued > 0 then
    -- the ones copied; when what is left fits, all of them: checkpoint_copy() copies those
    redis.call('ZREM', plan, unpack(queued, 1, copy and used or #queued))
  elseif copy and used * 4 < #links then
    local left = {}
    for i = used * 4 + 1, #links, 4 do
      left[#left + 1] = {links[i], links[i + 1], links[i + 2], links[i + 3]}
    end
    queue(left, function(i) return string.format('%011d', i) end)
  end
  if copy then
    emit(copy)
  end
  return copy ~= nil
end

-- The new keys replace the live ones; then their events are announced, a page at a time.
local function swap()
  local removed, ttl = redis.call('XLEN', log), redis.call('PTTL', log)
  redis.call('UNLINK', log, ix, ptr, plan)
  s.removed = tostring(removed)
  if redis.call('EXISTS', nl) == 0 then
    -- nothing to keep (checkpoint/compact.lua deletes the thread's keys then too)
    redis.call('UNLINK', nx, np)
    return false
  end
  for _, pair in ipairs({{nl, log}, {nx, ix}, {np, ptr}}) do
    move_in(pair[1], pair[2])
  end
  if ttl > 0 then
    expire_thread(log, {ix, ptr}, ttl)
  end
  s.phase, s.pc, s.first, s.base = 'announce', '', first_entry_id(log), s.last
  return true
end

-- by namespace ('c' .. lp(ns)), its newest live checkpoint id ('' if none): the 'early' phase's
local newest = {}

-- One unit of work; false once the compaction is done (the new keys swapped in).
local function step()
  if s.phase == 'records' then
    local from = s.pc == '' and '[e' or '(' .. s.pc
    local page = redis.call('ZRANGEBYLEX', ix, from, '[e\255', 'LIMIT', 0, 100)
    for _, m in ipairs(page) do
      local eid = string.sub(m, 2)
      if not id_less(base, eid) then
        redis.call('ZADD', plan, 0, by_id('1', eid))
      end
      if over(budget) then
        s.pc = m
        return true
      end
    end
    if #page < 100 then
      s.phase, s.pc = 'checkpoints', ''
    else
      s.pc = page[#page]
    end
  elseif s.phase == 'checkpoints' then
    local from = s.pc == '' and '[c' or '(' .. s.pc
    local members
    if keep > 0 then
      -- the last `keep` of the next namespace, then past it
      local m = redis.call('ZRANGEBYLEX', ix, from, '[c\255', 'LIMIT', 0, 1)[1]
      members = {}
      if m then
        -- the last `keep` the log held at the first slice: checkpoints put since are copied
        -- after the kept ones, as they come
        local p, at = 'c' .. lp((split_lp(string.sub(m, 2)))), 0
        while #members < keep do
          local page = redis.call('ZREVRANGEBYLEX', ix, '[' .. p .. '\255', '[' .. p,
                                  'LIMIT', at, keep)
          for _, c in ipairs(page) do
            local eid = redis.call('HGET', ptr, c)
            if #members < keep and eid and not id_less(base, eid) then
              members[#members + 1] = c
            end
          end
          if #page < keep then
            break
          end
          at = at + keep
        end
        s.pc = p .. '\255'
      end
    else
      members = redis.call('ZRANGEBYLEX', ix, from, '[c\255', 'LIMIT', 0, 100)
      s.pc = members[#members] or s.pc
    end
    for _, m in ipairs(members) do
      local eid = redis.call('HGET', ptr, m)
      if eid and not id_less(base, eid) then
        redis.call('ZADD', plan, 0, by_id('2', eid, m))
      end
      if keep <= 0 and over(budget) then
        s.pc = m
        return true
      end
    end
    if #members == 0 or (keep <= 0 and #members < 100) then
      if keep > 0 then
        -- DeltaChannels' ancestors (checkpoint/delta.lua); a few per namespace, so in this call
        local listed, had = {}, {}
        for _, item in ipairs(redis.call('ZRANGEBYLEX', plan, '[2', '[2\255')) do
          local m = string.sub(item, 42)
          listed[#listed + 1] = m
          had[m] = true
        end
        for _, m in ipairs(with_delta_ancestors(log, ptr, listed, nil, cache)) do
          local eid = not had[m] and redis.call('HGET', ptr, m)
          if eid and not id_less(base, eid) then
            redis.call('ZADD', plan, 0, by_id('2', eid, m))
          end
        end
      end
      s.phase, s.pc = 'copy', ''
    end
  elseif s.phase == 'copy' then
    local from = s.pc == '' and '-' or '(' .. s.pc
    local item = redis.call('ZRANGEBYLEX', plan, from, '(3', 'LIMIT', 0, 1)[1]
    if not item then
      s.phase, s.pc = 'early', '0'
      return true
    end
    local before = s.pc
    s.pc = item
    local eid = string.format('%d-%d', string.sub(item, 2, 21), string.sub(item, 22, 41))
    -- a checkpoint whose chain is being copied: its header, kept from the unit that first read
    -- it (its own event may hold a snapshot of megabytes, read once more for its own copy)
    local again = s.head_of == item
    local f = again and fields_of(cmsgpack.unpack(s.head)) or entry_fields(log, eid, cache)
    if string.sub(item, 1, 1) == '1' then
      if f then
        emit(copy_header(eid, f))
      end
    elseif f and deleting and named[f.run or ''] then
      redis.call('ZADD', plan, 0, '3' .. run_no[f.run] .. lp(f.ns) .. f.id)
    elseif f then
      if not again and deleting and id_less(checked, eid) and dependency(f) then
        return false
      end
      if chained(eid, f) then
        if not again then
          local head = {}
          for k, v in pairs(f) do
            if not string.match(k, '^b%d+$') then
              head[#head + 1] = k
              head[#head + 1] = v
            end
          end
          s.head_of, s.head = item, cmsgpack.pack(head)
        end
        s.pc = before
        cache = {}
        return true
      end
      if again then
        f = entry_fields(log, eid, cache)
        s.head_of, s.head = '', ''
      end
      emit(checkpoint_copy(log, ptr, eid, f, cache, provided))
      local out = {}
      writes_copies(log, ptr, f, cache, out, base)
      emit_all(out)
    end
    cache = {}
  elseif s.phase == 'early' then
    -- writes that came before their checkpoint (checkpoint/compact.lua's early_writes()): newer
    -- than the newest checkpoint of their namespace, looked up once a call per namespace, so the
    -- others (nearly all of a long thread's) cost no command
    -- a page is one unit (a cursor cannot resume inside it), a fraction of a slice
    local r = redis.call('HSCAN', ptr, s.pc, 'MATCH', 'w*', 'COUNT', 50)
    for i = 1, #r[2], 2 do
      local name = r[2][i]
      local ns, id = split_lp(string.sub(name, 2))
      local p = 'c' .. lp(ns)
      if newest[p] == nil then
        local top = redis.call('ZREVRANGEBYLEX', ix, '[' .. p .. '\255', '[' .. p, 'LIMIT', 0, 1)[1]
        newest[p] = top and string.sub(top, #p + 1) or ''
      end
      -- HSCAN may return a field twice
      if newest[p] < id and not redis.call('ZSCORE', ix, p .. id) and
          redis.call('ZADD', plan, 'NX', 0, name) == 1 then
        local out = {}
        writes_copies(log, ptr, {ns = ns, id = id}, cache, out, base)
        emit_all(out)
      end
    end
    s.pc = r[1]
    if r[1] == '0' then
      s.phase, s.pc = deleting and 'deleted' or 'tail', deleting and '' or base
    end
  elseif s.phase == 'deleted' then
    -- delete_for_runs' records, after the kept checkpoints
    local from = s.pc == '' and '[3' or '(' .. s.pc
    local page = redis.call('ZRANGEBYLEX', plan, from, '(4', 'LIMIT', 0, DROP_PAGE)
    emit_deleted(page)
    if #page < DROP_PAGE then
      s.phase, s.pc = 'tail', base
    else
      s.pc = page[#page]
    end
  elseif s.phase == 'tail' then
    -- what was appended since the first slice, in order; at its end, the swap
    local batch, asked = log_page(log, '(' .. s.pc, 10)
    for _, e in ipairs(batch) do
      local f = fields_of(e[2])
      local kind = tail_kind(f)
      if kind == 'checkpoint' then
        if deleting and dependency(f) then
          return false
        end
        emit(checkpoint_copy(log, ptr, e[1], f, cache, provided), e[1])
      elseif kind == 'writes' then
        emit(copy_header(e[1], f), e[1])
      elseif kind == 'dropped' then
        -- left out
      elseif f.k ~= nil and f.k ~= 'pruned' then
        -- a record (delete_for_runs' delete) may remove what is copied already: start again
        s = nil
        return false
      end
      s.pc = e[1]
      if over(budget) then
        return true
      end
    end
    if #batch < asked then
      emit_deleted(redis.call('ZRANGEBYLEX', plan, '[4', '(5'))
      return swap()
    end
  elseif s.phase == 'announce' then
    -- every event in the log is announced in its slot's feed, copies too (as
    -- checkpoint/compact.lua's are); events appended since the swap announced themselves
    -- (pages by bytes: a copy may hold a whole snapshot)
    local batch, asked = log_page(log, s.pc == '' and '-' or '(' .. s.pc, 20, s.base)
    for _, e in ipairs(batch) do
      notify(feed, ARGV[1], e[1], fields_of(e[2]))
      s.pc = e[1]
      if over(budget) then
        return true
      end
    end
    return #batch == asked
  end
  return true
end

-- The first slice does one unit and saves the state, its first write that may grow memory: a
-- full server refuses it there, and the caller compacts in one script, which frees first. The
-- swap is never in it: the caller sends it alone, so a durability mode waits after it.
local units, going = 0, true
units_begin()
while going do
  going = step()
  units = units + 1
  if going and (units >= most or over(budget) or ARGV[5] == 'start') then
    break
  end
end
if refused then
  -- nothing was written but the scratch keys
  redis.call('UNLINK', nl, nx, np, st, plan)
  return refused
end
if s == nil then
  -- restart in the next call, from the beginning
  redis.call('UNLINK', nl, nx, np, st, plan)
  redis.call('HSET', st, 'token', '')
  redis.call('PEXPIRE', st, 3600000)
  return {'more', fresh, 0, 0}
end
if not going then
  redis.call('UNLINK', st)
  return {'done', fresh, tonumber(s.removed), tonumber(s.deleted)}
end
s.h = heads[nl]
save_slice(st, s, {nl, nx, np, st, plan})
-- in the tail, how far behind the writers it is: the ms since the event at its cursor was appended
local lag = ''
if s.phase == 'tail' then
  local now = redis.call('TIME')
  lag = string.format('%d', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) -
    tonumber(string.match(s.pc, '^(%d+)')))
end
return {'more', fresh, 0, 0, s.phase, lag}
