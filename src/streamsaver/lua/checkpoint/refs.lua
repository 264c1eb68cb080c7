-- The references the events of a thread's log make, checked one event at a time, for
-- checkpoint/verify.lua (one script) and checkpoint/verify_slice.lua (in slices), against `ptr`,
-- the pointers a replay of that very log projected (so what live indexes hold does not matter
-- here):
--   a checkpoint's channel versions (cv) each resolve to a stored value: a pointer to an
--     existing field, down every append part's base to a whole value, every shared part naming
--     a writes event's field; its own value parts likewise;
--   its parent is a checkpoint of its namespace in the log;
--   a writes event's checkpoint is in the log (writes may precede their checkpoint);
--   a copy's copy_of and origin are well-formed.
-- ref_checker(log, ptr, report, seen, want) returns check(eid, f), which calls report(eid,
-- what) per reference that does not resolve, seen(key) per checkpoint (key: lp(ns) .. id) and
-- want(key, eid, what) per checkpoint an event needs in the log. A log that starts with a
-- prune's tombstone had its head trimmed on purpose: parents and checkpoints of writes may be
-- among what it trimmed, so callers report what is still wanted at the end only otherwise.
-- Events replay skips as malformed are not looked into (they are counted as skipped); those
-- skipped for a reference are reported here.
--
-- What one event's check costs is bounded by the event itself, never by the history behind it:
-- the replay that built `ptr` pointed a version at a value part only once it had checked that
-- part (a shared part's write is in the log and is a writes event) and its base (stored, or
-- among the same event's parts: checkpoint/projection.lua's value_refs()), and pointers are
-- never removed, so every pointer's chain resolves down to a whole value, and a version
-- resolves when `ptr` holds it: one HGET, not a walk down its chain, which re-read an event
-- per link (a pruned checkpoint holds its whole chain: one 720 KB event read 328 times for
-- one version, 773 ms in one script). An event the replay applied (`ptr` points its
-- checkpoint at it) had its own parts checked that way too; only one it skipped has them
-- checked here, to be named. Entries read for those checks are kept for the calls that
-- follow, a few hundred at most.
local ID = '^%d+%-%d+$'

-- entries kept for later events' checks before the cache starts afresh: what a slice reads is
-- bounded by its budget, and the single verify script (a whole log) by this
local CACHED = 256

local function ref_checker(log, ptr, report, seen, want)
  local memo, cache, cached = {}, {}, 0

  local function entries()
    cached = cached + 1
    if cached > CACHED then
      cache, cached = {}, 0
    end
    return cache
  end

  -- nil when (ns p, channel, version) resolves to a whole value, else why not
  local function resolve(p, channel, version)
    local key = p .. lp(channel) .. version
    local known = memo[key]
    if known == nil then
      known = redis.call('HEXISTS', ptr, 'b' .. key) == 0 and
        'version ' .. version .. ' has no stored value' or false
      memo[key] = known
    end
    return known or nil
  end

  local function check_checkpoint_refs(eid, f)
    local nv = checkpoint_shape(f)
    if not nv then
      return
    end
    local p = lp(f.ns)
    local what = 'checkpoint ' .. f.id .. ': channel '
    if redis.call('HGET', ptr, 'c' .. p .. f.id) ~= eid then
      -- skipped by the replay (or put again later): its own parts, to name what fails
      for i = 1, #nv, 3 do
        local problem = shared_problem(log, f['b' .. ((i - 1) / 3)], entries())
        if not problem and nv[i + 2] ~= '' then
          problem = resolve(p, nv[i], nv[i + 2])
        end
        if problem then
          report(eid, what .. nv[i] .. ' version ' .. nv[i + 1] .. ': ' .. problem)
        end
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
      want(p .. f.parent, eid, 'checkpoint ' .. f.id .. ': its parent ' ..
        f.parent .. ' (ns ' .. f.ns .. ') is not in the log')
    end
  end

  return function(eid, f)
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
        seen(lp(f.ns) .. f.id)
      end
      check_checkpoint_refs(eid, f)
    elseif f.k == 'writes' and check_writes(f) then
      want(lp(f.ns) .. f.id, eid, 'writes of checkpoint ' .. f.id .. ' (ns ' .. f.ns ..
        '), which is not in the log')
    end
  end
end

-- A checkpoint's pending writes may be held as one list or one field each (pending_writes()
-- reads both; which one depends on the version that wrote them and on how many there are),
-- so verify compares them by what they hold, through their "w" field; the "v"/"u" fields
-- behind it are read there, not compared one by one, nor reported missing or extra.
local function behind_writes(k)
  local kind = string.sub(k, 1, 1)
  return kind == 'v' or kind == 'u'
end

-- Whether the live indexes may lack field k of the replay's ptr: besides the fields behind
-- the writes, 'm' (checkpoint/projection.lua's apply_delete), which indexes projected before it
-- existed lack; checkpoint/delete_thread.lua then reads the records instead, so its absence costs
-- time, not truth. And 'z', the log's size, an estimate (checkpoint/projection.lua's
-- entry_size()): never compared.
local function may_lack(k)
  return behind_writes(k) or k == 'm' or k == 'z'
end

-- How verify compares one ptr field of the live indexes (`live`) with the replay's
-- (`rebuilt`), given its value in `live` (v) and in `rebuilt` (theirs, nil when absent):
-- nil when they agree, else the problem's word ('differs', or 'extra' with no `theirs`).
local function ptr_problem(live, rebuilt, k, v, theirs)
  if behind_writes(k) or k == 'z' then
    return nil
  end
  if theirs == nil then
    return 'extra'
  end
  if theirs == v then
    return nil
  end
  if string.sub(k, 1, 1) ~= 'w' then
    return 'differs'
  end
  local ns, cid = split_lp(string.sub(k, 2))
  local p = lp(ns)
  local ok_a, a = pcall(pending_writes, live, p, cid)
  local ok_b, b = pcall(pending_writes, rebuilt, p, cid)
  if not (ok_a and ok_b) or #a ~= #b then
    return 'differs'
  end
  for i = 1, #a do
    if a[i] ~= b[i] then
      return 'differs'
    end
  end
  return nil
end
