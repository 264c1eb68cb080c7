-- One slice of a bucket's rebuild or verify: replaying a bucket's whole log in one script held
-- the server (which runs one script at a time) for as long as the log is long, and a tenant's
-- big store would stall every other tenant. Each call does a few ms of work and
-- keeps its place in a state hash; writers go on projecting onto the live keys meanwhile.
-- In order, each phase going on from its cursor:
--   replay  the log into scratch keys through store_apply(), the one projection; every later
--           slice first replays what writers appended since, so the scratch keys follow the
--           live ones. verify also checks each event against the replay so far (store_refs).
-- rebuild, once the scratch keys hold the whole log, swaps them in within the same call
-- (nothing is appended between its last XRANGE and the swap). With the server's vector index
-- (mft, or ARGV[5] setting it) the items' documents then follow: 'docs' writes each item's
-- from the live mvec a page at a time, 'drop' deletes those of items the old mvec had and the
-- live one has not.
-- verify compares instead, a page of SCAN at a time, both caught up with the log first so
-- each page compares them at one moment: every scratch member against the live index
-- (missing, differs), every live one against the scratch (extra), for mix, mitem, mns, mexp
-- and mvec in turn; then, with mft set, each item's documents (mv). The last slice deletes
-- the scratch keys.
-- KEYS: mlog mix mitem mns mexp mvec mft mnsz, scratch mix mitem mns mexp mvec mnsz, state,
-- old mvec, epoch (core.keys.store_slice_keys; one slot)
-- ARGV[1]: 'rebuild' or 'verify'   ARGV[2]: the operation's token   ARGV[3]: 'start' for its
-- first slice, else ''   ARGV[4]: ms after which it stops   ARGV[5]: rebuild: the vector
-- index's dims, to keep its documents from now on (the store's setup), else ''
-- Returns {'more' or 'done', 1 if it (re)started from the log's start else 0, events applied,
-- events skipped, line, ...}: "<id> <reason>" per event skipped, "ref <id> ..." (verify),
-- "<index> <missing|differs|extra> <member>", "mv <missing|differs|extra> <member>". A page of
-- SCAN may name a member twice: the caller keeps each line once.
local log, ft, st, oldvec, epoch_key = KEYS[1], KEYS[7], KEYS[15], KEYS[16], KEYS[17]
-- as store_apply() takes them: mix mitem mns mexp mvec mft mnsz (the scratch keys no mft: the
-- vector documents are rewritten after the swap)
local live = { KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ft, KEYS[8] }
local scratch = { KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], nil, KEYS[14] }
-- the indexes replayed, by their place in live and scratch
local INDEXES = { 1, 2, 3, 4, 5, 7 }
local names = { 'mix', 'mitem', 'mns', 'mexp', 'mvec', nil, 'mnsz' }
local function scratch_keys()
  return scratch[1], scratch[2], scratch[3], scratch[4], scratch[5], scratch[7]
end
local mode, budget = ARGV[1], tonumber(ARGV[4])

local first_id = first_entry_id(log)
local s = fields_of(redis.call('HGETALL', st))
if ARGV[3] == 'start' or s.token ~= ARGV[2] or s.first ~= first_id then
  s = nil
end
local out = { 'more', 0, 0, 0 }
if not s then
  -- an abandoned operation's scratch keys may be large: freed in the background
  redis.call('UNLINK', st, oldvec, scratch_keys())
  s = { token = ARGV[2], first = first_id, at = '', phase = 'replay', pc = '0', dims = ARGV[5] }
  out[2] = 1
end

units_begin()
local stopped = false
local function spent()
  stopped = stopped or over(budget)
  return stopped
end

-- replay what the scratch keys lack; true once they hold the whole log
local function catch_up()
  while true do
    local batch, asked = log_page(log, s.at == '' and '-' or '(' .. s.at, 10)
    local n = 0
    for _, e in ipairs(batch) do
      local f = fields_of(e[2])
      local ref = mode == 'verify' and store_refs(scratch, e[1], f)
      if ref then
        out[#out + 1] = ref
      end
      local why = store_apply(scratch, e[1], f)
      if why then
        out[4] = out[4] + 1
        out[#out + 1] = e[1] .. ' ' .. why
      else
        out[3] = out[3] + 1
      end
      s.at, n = e[1], n + 1
      if spent() then
        break
      end
    end
    if n == #batch and #batch < asked then
      return true
    end
    if stopped then
      return false
    end
  end
end

-- one page of a SCAN of key (a zset or a hash): {member, value, ...}, and the next cursor
local function page(key, zset)
  local r = redis.call(zset and 'ZSCAN' or 'HSCAN', key, s.pc, 'COUNT', 20)
  return r[2], r[1]
end

-- a member's value in key; a score as a number, whatever its text
local function value_of(key, zset, member)
  local v = redis.call(zset and 'ZSCORE' or 'HGET', key, member)
  if not v then
    return nil
  end
  return zset and tonumber(v) or v
end

-- verify's comparisons: a phase per index and direction, then the documents
local COMPARE = {}
for _, i in ipairs(INDEXES) do
  local zset = i == 1 or i == 4 or i == 7
  COMPARE[#COMPARE + 1] = { scratch[i], live[i], zset, names[i], true }
  COMPARE[#COMPARE + 1] = { live[i], scratch[i], zset, names[i], false }
end

-- an item's documents against its replayed vectors
local function check_docs(dims, member, vec)
  local docs = vector_docs(live, dims, member, vec)
  for _, doc in ipairs(docs) do
    local got = redis.call('HMGET', doc[1], 'v', 'p', 'm')
    if not got[1] then
      out[#out + 1] = 'mv missing ' .. member
      break
    elseif got[1] ~= doc[2] or got[2] ~= doc[3] or got[3] ~= member then
      out[#out + 1] = 'mv differs ' .. member
      break
    end
  end
  if redis.call('EXISTS', vector_doc(live, member, #docs)) == 1 then
    out[#out + 1] = 'mv extra ' .. member
  end
end

-- one page of a phase over key: each(member, value); true when the scan is through
local function scan(key, zset, each)
  local flat, cursor = page(key, zset)
  for i = 1, #flat, 2 do
    each(flat[i], flat[i + 1])
  end
  s.pc = cursor
  return cursor == '0'
end

local function next_phase(phase)
  s.phase, s.pc = phase, '0'
end

local function swap()
  -- a search's HSCAN of the old mitem cannot go on in the new one (store/store_scan.lua)
  redis.call('HINCRBY', epoch_key, 'n', 1)
  for _, i in ipairs(INDEXES) do
    if i == 5 and vector_dims(live) then
      -- the docs of items no longer in it are dropped by the 'drop' phase
      if redis.call('EXISTS', live[5]) == 1 then
        redis.call('RENAME', live[5], oldvec)
      end
    else
      -- RENAME would free the old index in this call; UNLINK frees it in the background
      redis.call('UNLINK', live[i])
    end
    move_in(scratch[i], live[i])
  end
end

local function step()
  if s.phase == 'replay' then
    if not catch_up() then
      return
    end
    if mode == 'verify' then
      next_phase('1')
      return
    end
    if s.dims ~= '' then
      redis.call('SET', ft, s.dims)
    end
    swap()
    next_phase(vector_dims(live) and 'docs' or 'done')
  elseif mode == 'rebuild' then
    local dims = vector_dims(live)
    if s.phase == 'docs' then
      if scan(live[5], false, function(member, vec)
        set_vector_docs(live, dims, member, vec)
      end) then
        next_phase('drop')
      end
    elseif s.phase == 'drop' then
      if scan(oldvec, false, function(member, vec)
        if redis.call('HEXISTS', live[5], member) == 0 then
          drop_vector_docs(live, dims, member, vec)
        end
      end) then
        next_phase('done')
      end
    end
  elseif s.phase == 'mv' or s.phase == 'mv extra' then
    local dims = vector_dims(live)
    if not dims then
      next_phase('done')
    elseif s.phase == 'mv' then
      if scan(scratch[5], false, function(member, vec) check_docs(dims, member, vec) end) then
        next_phase('mv extra')
      end
    elseif scan(live[5], false, function(member, _)
      if redis.call('HEXISTS', scratch[5], member) == 0 and
          redis.call('EXISTS', vector_doc(live, member, 0)) == 1 then
        out[#out + 1] = 'mv extra ' .. member
      end
    end) then
      next_phase('done')
    end
  else
    -- both sides at one moment: the scratch keys caught up with the log first
    if not catch_up() or stopped then
      return
    end
    local n = tonumber(s.phase)
    local key, other, zset, name, wanted = unpack(COMPARE[n])
    if scan(key, zset, function(member, value)
      local have = value_of(other, zset, member)
      value = zset and tonumber(value) or value
      if wanted and not have then
        out[#out + 1] = name .. ' missing ' .. member
      elseif wanted and have ~= value then
        out[#out + 1] = name .. ' differs ' .. member
      elseif not wanted and not have then
        out[#out + 1] = name .. ' extra ' .. member
      end
    end) then
      next_phase(n < #COMPARE and tostring(n + 1) or 'mv')
    end
  end
end

while s.phase ~= 'done' and not stopped do
  step()
  spent()
end
if s.phase == 'done' then
  redis.call('UNLINK', st, oldvec, scratch_keys())
  out[1] = 'done'
  return out
end
save_slice(st, s, { st, oldvec, scratch_keys() })
return out
