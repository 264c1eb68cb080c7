-- Helpers shared by every streamsaver script. Scripts are this file, projection.lua and, for
-- readers, read.lua, followed by one entry body (see streamsaver/_scripts.py).
--
-- Every script touches the keys of ONE thread, which share a hash tag (so, one cluster slot):
--   KEYS[1] log  stream: the thread's events, the only source of truth
--   KEYS[2] ix   sorted set, every score 0, so members sort by their bytes:
--                  "c" .. lp(ns) .. checkpoint_id                 a live checkpoint
--                  "r" .. lp(run_id) .. lp(ns) .. checkpoint_id   run index for delete_for_runs
--   KEYS[3] ptr  hash of pointers into the log:
--                  "c" .. lp(ns) .. checkpoint_id            -> id of the checkpoint's event
--                  "b" .. lp(ns) .. lp(channel) .. version   -> "<event id> <field>[ <base>]":
--                      the event field holding the value, or, with a base version, holding the
--                      items appended to the value of (channel, base) (see _delta.py)
--                  "w" .. lp(ns) .. checkpoint_id            -> msgpack [task, idx, event id, pos, ...]
--   KEYS[4] feed (scripts that append: append, import, delete_runs, compact) stream of
--                pointers to the appended events, shared by the threads of one cluster slot
--                (see notify() below and streamsaver/_feed.py); their ARGV[1] is its MAXLEN
-- lp() is a length prefix: it makes every composite member prefix-free, so no thread,
-- namespace, channel or task name can collide with another whatever bytes it holds.

local SCHEMA = 1

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

-- Entries are looked up by exact id; one call may need the same entry for several values.
local function entry_fields(log, eid, cache)
  local f = cache[eid]
  if f == nil then
    local r = redis.call('XRANGE', log, eid, eid)
    if #r == 0 then
      return nil
    end
    f = fields_of(r[1][2])
    cache[eid] = f
  end
  return f
end

-- Every event enters a thread's log here (append, import, delete_runs, compact), so what each
-- entry carries besides its own fields is added in one place.
local function append_event(log, fields)
  return redis.call('XADD', log, '*', unpack(fields))
end

-- The feed: every event appended to a thread's log is announced, in the same script, by a small
-- pointer entry in the feed of the log's own slot, which tail_all and consumer groups read. It
-- is derived and trimmed (approximate MAXLEN); no script reads it, so replay never needs it.
-- maxlen 0 (or no feed key) announces nothing.
local function notify(feed, maxlen, id, f)
  maxlen = tonumber(maxlen) or 0
  if feed == nil or maxlen <= 0 then
    return
  end
  redis.call('XADD', feed, 'MAXLEN', '~', maxlen, '*', 't', f.thread or '', 'e', id,
             'k', f.k or '', 'ns', f.ns or '', 'c', f.id or '')
end
