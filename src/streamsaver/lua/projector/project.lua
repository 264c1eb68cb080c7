-- The projector applies a slot's feed entries after its cursor, in order, and moves the cursor,
-- atomically: a crash or a second replica can neither skip nor double an entry's effect.
-- KEYS: feed state registry activity runs meta (projector/registry.lua)
-- ARGV: [1] key prefix  [2] at most this many entries  [3] last entry to apply, or '+'
--       [4] consumer group, or ''  [5] ms after which it applies no further entry (shared/slice.lua:
--           a catching-up projector holds other tenants no longer than a long operation's
--           slice)  [6..] feed entry ids delivered to the group, acknowledged here once
--           applied (those after the new cursor stay pending)
-- Returns {'ok', applied, cursor, more (1: entries remain up to ARGV[3]), unknown...}, each
-- unknown "<feed id> <kind>" an entry of a kind this version does not know (its thread is
-- recomputed from its log), or {'behind'}: entries after the cursor were trimmed unapplied
-- (or, on Redis 6.2, the slot was never seeded), or {'reseed', thread}: an entry asks for a
-- thread's recompute (its log was rewritten) and its log is long: either way the slot needs
-- projector/seed.lua's slices, and nothing was applied; or {'seeding'}: a seed of the slot is under
-- way, nothing was applied (it sets the cursor when it ends).
local feed, state = KEYS[1], KEYS[2]
local prefix, count, stop, group = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local budget = tonumber(ARGV[5])
-- a seed of the slot in progress (projector/seed.lua) will set the cursor when it swaps its keys
-- in: what this call applied would be applied again after it
if redis.call('EXISTS', slot_sibling(feed, 'seed')) == 1 then
  return {'seeding'}
end
local cursor = usable_cursor(feed, state)
if not cursor then
  return {'behind'}
end
local batch = after_cursor(feed, cursor, stop, count)
local known = {checkpoint = true, writes = true, delete = true, thread_deleted = true}
-- the longest log recomputed in this call (~5 us an event), and the most index members it
-- drops first (~2 us each: a deleted thread's log is short, but its runs may be thousands)
local RECOMPUTE_MOST, UNINDEX_MOST = 50, 100
local order, whole, unknown, acc = {}, {}, {}, {}
local taken = 0
units_begin()
for i, e in ipairs(batch) do
  if i > 1 and over(budget) then
    break
  end
  taken = i
  local p = fields_of(e[2])
  local t = p.t
  if t then
    if whole[t] == nil then
      order[#order + 1] = t
      whole[t] = false
    end
    local f = nil
    if p.k == 'pruned' or p.k == 'thread_deleted' then
      -- a compaction's tombstone (the copies after it rewrote the thread) or a deletion:
      -- recomputed below
      f = nil
    elseif known[p.k] then
      local base = thread_base(prefix, t)
      f = p.e and entry_fields(base .. 'log', p.e, {})
    else
      unknown[#unknown + 1] = e[1] .. ' ' .. tostring(p.k)
    end
    -- a gone or unknown entry may have removed history: recompute. A compaction's copies
    -- (origin) add what their sources did; its tombstone, announced first, recomputes
    if f == nil then
      whole[t] = true
    elseif not whole[t] then
      index_event(acc, KEYS, t, f)
    end
  end
end
-- a recompute reads the whole log in this call and drops every index member of the thread:
-- a long log, or many members, are left to a seed of the slot, in slices (nothing is written
-- here, and the cursor stays)
for _, t in ipairs(order) do
  if whole[t] and (redis.call('XLEN', thread_base(prefix, t) .. 'log') > RECOMPUTE_MOST or
      indexed(KEYS[5], t) + indexed(KEYS[6], t) > UNINDEX_MOST) then
    return {'reseed', t}
  end
end
-- before any recompute(), which drops a thread's members and adds its log's again
add_members(acc)
for _, t in ipairs(order) do
  if whole[t] then
    recompute(KEYS, prefix, t)
  else
    local base = thread_base(prefix, t)
    set_row(KEYS[3], KEYS[4], t, thread_row(base .. 'log', base .. 'ix', base .. 'ptr'))
  end
end
-- the entries applied: those the budget left for the next call stay after the cursor
local cut = taken < #batch
for i = #batch, taken + 1, -1 do
  batch[i] = nil
end
if #batch > 0 then
  cursor = batch[#batch][1]
  local now = redis.call('TIME')
  redis.call('HSET', state, 'cursor', cursor, 'at', now[1] * 1000 + math.floor(now[2] / 1000),
             'meta_form', META_FORM)
  redis.call('HINCRBY', state, 'applied', #batch)
end
if group ~= '' then
  local acks = {}
  for i = 6, #ARGV do
    if not id_lt(cursor, ARGV[i]) then
      acks[#acks + 1] = ARGV[i]
    end
  end
  if #acks > 0 then
    redis.call('XACK', feed, group, unpack(acks))
  end
end
local more = 0
if cut or #batch == count then
  more = 1
end
local out = {'ok', #batch, cursor, more}
for _, u in ipairs(unknown) do
  out[#out + 1] = u
end
return out
