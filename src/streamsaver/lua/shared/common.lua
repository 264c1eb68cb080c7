-- Helpers shared by every streamsaver script. Scripts are this file, checkpoint/projection.lua and,
-- for readers, checkpoint/read.lua, followed by one entry body (see streamsaver/lua/__init__.py).
--
-- Every script touches the keys of ONE thread, which share a hash tag (so, one cluster slot):
--   KEYS[1] log  stream: the thread's events, the only source of truth
--   KEYS[2] ix   sorted set, every score 0, so members sort by their bytes:
--                  "c" .. lp(ns) .. checkpoint_id                 a live checkpoint
--                  "r" .. lp(run_id) .. lp(ns) .. checkpoint_id   run index for delete_for_runs
--                  "e" .. event id                                a record (a delete event)
--   KEYS[3] ptr  hash of pointers into the log:
--                  "c" .. lp(ns) .. checkpoint_id            -> id of the checkpoint's event
--                  "b" .. lp(ns) .. lp(channel) .. version   -> "<event id> <field>[ <base>]":
--                      the event field holding the value, or, with a base version, holding the
--                      items appended to the value of (channel, base) (see core/delta.py)
--                  "w" .. lp(ns) .. checkpoint_id            -> its pending writes while they
--                      are few (a msgpack list), else how many it has,
--                  "v" .. lp(ns) .. lp(checkpoint_id) .. i   -> the i-th, and
--                  "u" .. lp(ns) .. lp(checkpoint_id) .. lp(task) .. idx -> its i (pending_writes())
--                  "h" -> the dg of the log's last entry, if it has one (see append_event())
--                  "z" -> about what compacting the log would copy (checkpoint/projection.lua's
--                      entry_size()), which decides where a keep_last put compacts
--                  "x" .. lp(ns) .. checkpoint_id, "m", "g", "d": what deletions left
--                      (checkpoint/projection.lua's apply_delete and apply_thread_deleted)
--   KEYS[4] feed (scripts that append: append, import, delete_runs, compact) stream of
--                pointers to the appended events, shared by the threads of one cluster slot
--                (see notify() below and streamsaver/core/feeds.py); their ARGV[1] is its MAXLEN,
--                their ARGV[2] 'chain' or '' (checkpoint/append.lua's: 'chain <ch>', see append_event())
-- lp() is a length prefix: it makes every composite member prefix-free, so no thread,
-- namespace, channel or task name can collide with another whatever bytes it holds.

local SCHEMA = 2

local function lp(s)
  return #s .. ':' .. s
end

-- 'n:' .. a .. rest  ->  a, rest
local function split_lp(s)
  local colon = string.find(s, ':', 1, true)
  local n = tonumber(string.sub(s, 1, colon - 1))
  return string.sub(s, colon + 1, colon + n), string.sub(s, colon + n + 1)
end

local function fields_of(flat)
  local t = {}
  for i = 1, #flat, 2 do
    t[flat[i]] = flat[i + 1]
  end
  return t
end

-- Lua's < goes through strcoll, which follows the server's locale; ids compare as bytes.
local function bytes_lt(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- An integrity failure's reply (streamsaver/core/errors.py): a marker, then its details as msgpack,
-- hex-encoded, because thread ids, namespaces and channels may hold any byte, a newline included.
local function integrity(marker, details)
  local packed = cmsgpack.pack(details)
  return 'STREAMSAVER_' .. marker .. ' ' ..
    string.gsub(packed, '.', function(c) return string.format('%02x', string.byte(c)) end)
end

-- Entries are looked up by exact id; one call may need the same entry for several values.
-- An id the server refuses (a hand-edited reference beyond 64 bits) names no entry either.
local function entry_fields(log, eid, cache)
  local f = cache[eid]
  if f == nil then
    local r = redis.pcall('XRANGE', log, eid, eid)
    if r.err or #r == 0 then
      return nil
    end
    f = fields_of(r[1][2])
    cache[eid] = f
  end
  return f
end

-- A page of a stream's entries from `start` (an XRANGE start) for a loop that reads it a page
-- at a time: at most `most` entries, and about PAGE_BYTES once this call has seen how large
-- they are (its first page is one entry). Counting entries alone, one page of a pruned log's
-- checkpoints (each may hold a whole conversation), or of a Store's large documents, copied
-- megabytes into the script at once.
-- `stop`: the page's last id (XRANGE's end), '+' by default. Returns the page and the count
-- asked for (a shorter page is the range's end).
local PAGE_BYTES = 65536
local entry_bytes = nil  -- the largest entry this call has read
local function log_page(log, start, most, stop)
  local n = entry_bytes and math.max(1, math.min(most, math.floor(PAGE_BYTES / entry_bytes))) or 1
  local page = redis.call('XRANGE', log, start, stop or '+', 'COUNT', n)
  for _, e in ipairs(page) do
    local bytes = 0
    for i = 2, #e[2], 2 do
      bytes = bytes + #e[2][i]
    end
    entry_bytes = math.max(entry_bytes or 1, bytes)
  end
  return page, n
end

-- An append part that names the bytes of a write instead of holding them (see core/delta.py):
-- msgpack ["shared", "<event id> w<i>", offset, n]; nil for any other part. The write's field
-- from offset on is the tail. A reference that does not resolve returns false and a reason.
local SHARED = '\148\166shared'

local function shared_tail(log, part, cache)
  if string.sub(part, 1, #SHARED) ~= SHARED then
    return nil
  end
  local ok, r = pcall(cmsgpack.unpack, part)
  if not ok or type(r) ~= 'table' or type(r[2]) ~= 'string' or type(r[3]) ~= 'number'
      or type(r[4]) ~= 'number' then
    return false, 'a malformed shared part'
  end
  local eid, field = string.match(r[2], '^(%d+%-%d+) (w%d+)$')
  local f = eid and entry_fields(log, eid, cache)
  local raw = f and f[field]
  if type(raw) ~= 'string' or r[3] < 0 or r[3] >= #raw then
    return false, 'a shared part naming ' .. r[2] .. ', which is not in the log'
  end
  return string.sub(raw, r[3] + 1), r[4]
end

-- Why an append part that names a write does not resolve, or nil when it does (or names
-- none): stricter than shared_tail(), the event it names must be a writes event.
local function shared_problem(log, part, cache)
  local tail, why = shared_tail(log, part, cache)
  if tail == false then
    return why
  elseif tail then
    local ref = cmsgpack.unpack(part)[2]
    local f = entry_fields(log, string.match(ref, '^%S+'), cache)
    if f.k ~= 'writes' then
      return 'a shared part naming ' .. ref .. ', which is not a writes event'
    end
  end
  return nil
end

-- A stored value part as readers and copies need it: a shared part becomes the ordinary append
-- part ["append", bin32 tail, n] holding the bytes it names; anything else stays as it is.
-- nil and a reason when a shared part does not resolve.
local function plain_part(log, part, cache)
  local tail, n = shared_tail(log, part, cache)
  if tail == false then
    return nil, n
  elseif tail then
    return '\147\166append\198' .. struct.pack('>I4', #tail) .. tail .. cmsgpack.pack(n)
  end
  return part
end

-- Hash reads of up to a thousand fields per command (unpack() has a C stack limit).
local function hmget(key, names)
  local out = {}
  for s = 1, #names, 1000 do
    local r = redis.call('HMGET', key, unpack(names, s, math.min(s + 999, #names)))
    for i = 1, #r do
      out[#out + 1] = r[i]
    end
  end
  return out
end

local function hget(key, name)
  return redis.call('HGET', key, name)
end

-- The pending writes of checkpoint `cid` of namespace lp `p`, in the order they first arrived:
-- flat {task, idx, event id, pos, ...}. A few are that list, msgpack, in the 'w' field; more
-- are one ptr field each (shared/common.lua's header; checkpoint/projection.lua's apply_writes()
-- stores them), so a put_writes costs what its own writes do, not what the checkpoint holds
-- already: one list of them all, re-read and re-packed by every put_writes, made a fan-out of n
-- tasks cost O(n^2). A 'w' that is not a number is the list. `get`/`mget`:
-- how ptr is read (checkpoint/projection.lua's sink during a replay), Redis itself by default.
local function pending_writes(ptr, p, cid, get, mget)
  local raw = (get or hget)(ptr, 'w' .. p .. cid)
  local n = tonumber(raw)
  if not raw then
    return {}
  elseif not n then
    return cmsgpack.unpack(raw)
  end
  local names, base = {}, 'v' .. p .. lp(cid)
  for i = 1, n do
    names[i] = base .. i
  end
  local out = {}
  for i, rec in ipairs((mget or hmget)(ptr, names)) do
    local eid, pos, idx, task = string.match(rec or '', '^(%S+) (%d+) (%S+) (.*)$')
    if not eid then
      error({err = 'STREAMSAVER_CORRUPT pending write ' .. i .. ' of checkpoint ' .. cid ..
        ' is missing from its index: rebuild the thread (`streamsaver rebuild`)'})
    end
    out[#out + 1] = task
    out[#out + 1] = tonumber(idx)
    out[#out + 1] = eid
    out[#out + 1] = tonumber(pos)
  end
  return out
end

-- Every event enters a thread's log here (append, import, delete_runs, compact), so what each
-- entry carries besides its own fields is added in one place: the digest chain (docs/audit.md).
-- Scripts that append take ARGV[1], the feed's MAXLEN, and ARGV[2], 'chain' to chain their
-- events or '' not to (checkpoint/append.lua's may carry the client's ch: 'chain <ch>', see below).
-- A chained event gets two more fields, added last (to `fields` too):
--   ch  sha1 hex of its other fields in order, each name and value length-prefixed (lp)
--   dg  sha1 hex of (the previous entry's dg, or '' when it has none) .. ch
-- so altering an event breaks its ch, and removing or moving one breaks the next dg. The
-- entry id is not covered: the server assigns it after the fields are fixed; the order it
-- gives is covered by the chain. streamsaver/core/chain.py is the same definition, for verifying.
-- The previous dg is the log's last entry's. apply() projects it into ptr's "h" (so replay
-- rebuilds it): reading it there spares copying that entry, maybe a whole snapshot, into Lua;
-- without it (indexes dropped, unchained entries) the entry is read. KEYS[3] is the ptr hash.
-- Returns the entry id and its dg (nil when not chained).
local heads = {}
local function chain_head(log)
  local prev = heads[log] or redis.call('HGET', KEYS[3], 'h')
  if not prev then
    local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
    prev = last and fields_of(last[2]).dg or ''
  end
  return prev
end

-- ch: the event's ch as its writer computed it (streamsaver/core/chain.py), or nil to compute it
-- here. Building the lp() string of a whole event is most of what chaining costs the server,
-- so the writer sends it; the server still makes every link (dg), so a writer cannot splice
-- the chain, and a ch that does not match its fields is a break `audit verify` names, as an
-- edit after the fact is: the chain stays tamper-evident without trusting the writer.
local function append_event(log, fields, id, ch)
  local dg = nil
  if ch or string.sub(ARGV[2] or '', 1, 5) == 'chain' then
    local prev = chain_head(log)
    if not ch then
      -- lp() of each field, without copying the values into prefixed strings first
      local parts = {}
      for i = 1, #fields do
        parts[2 * i - 1] = #fields[i] .. ':'
        parts[2 * i] = fields[i]
      end
      ch = redis.sha1hex(table.concat(parts))
    end
    dg = redis.sha1hex(prev .. ch)
    fields[#fields + 1] = 'ch'
    fields[#fields + 1] = ch
    fields[#fields + 1] = 'dg'
    fields[#fields + 1] = dg
  end
  heads[log] = dg or ''
  return redis.call('XADD', log, id or '*', unpack(fields)), dg
end

-- The slot's other per-slot keys, named after its feed (streamsaver/core/feeds.py: '<prefix>:{<slot
-- tag>}:' then its kind): derived from the feed key rather than passed, so every script that
-- appends keeps its KEYS, and they always share the feed's slot.
local function slot_sibling(feed, kind)
  return string.sub(feed, 1, #feed - 4) .. kind
end

-- The slot's thread index.
local function thread_index(feed)
  return slot_sibling(feed, 'threads')
end

-- The feed: every event appended to a thread's log is announced, in the same script, by a small
-- pointer entry in the feed of the log's own slot, which tail_all and consumer groups read. It
-- is derived and trimmed (approximate MAXLEN); no script reads it, so replay never needs it.
-- maxlen 0 announces nothing, but the thread still joins its slot's index: listing threads
-- reads the indexes, never SCAN (a permission that would show every tenant's key names).
-- An entry carries what readers act on before fetching the event (the thread and event to
-- fetch, the kind and namespace to filter on), no more: every field is stored per entry, for
-- up to feed_maxlen entries a slot. Its checkpoint id (field 'c', ~37 bytes an entry, read by
-- nothing) is no longer written; entries written before may still carry it.
local function notify(feed, maxlen, id, f)
  maxlen = tonumber(maxlen) or 0
  if feed == nil then
    return
  end
  if f.thread then
    redis.call('SADD', thread_index(feed), f.thread)
  end
  if maxlen <= 0 then
    return
  end
  redis.call('XADD', feed, 'MAXLEN', '~', maxlen, '*', 't', f.thread or '', 'e', id,
             'k', f.k or '', 'ns', f.ns or '')
end

-- A long operation's scratch key `from`, if it was made, renamed over `to` (its live twin):
-- the scratch key's expiry (an abandoned operation's keys go away) does not come with it, the
-- live key's retention is its owner's to set.
local function move_in(from, to)
  if redis.call('EXISTS', from) == 1 then
    redis.call('RENAME', from, to)
    redis.call('PERSIST', to)
  end
end

-- Retention by time: every key of a thread gets one absolute expiry time, so they expire
-- together and no reader sees one without the others. ttl_ms > 0 (a saver's ttl) restarts the
-- clock; 0 keeps the log's remaining time (keys a script re-created, e.g. by compaction or
-- replay, follow the log). A log without expiry leaves every key as it is.
local function expire_thread(log, others, ttl_ms)
  local ttl = tonumber(ttl_ms) or 0
  if ttl <= 0 then
    ttl = redis.call('PTTL', log)
    if ttl <= 0 then
      return
    end
  end
  local now = redis.call('TIME')
  local at = string.format('%d', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + ttl)
  redis.call('PEXPIREAT', log, at)
  for _, key in ipairs(others) do
    redis.call('PEXPIREAT', key, at)
  end
end
