-- The Store's projection: how a memory event changes a bucket's indexes. The writer
-- (store/store_write.lua) calls store_apply() right after append_event(); store/store_slice.lua's
-- rebuild and verify call it for every stored event. This is its only definition.
--
-- Every Store script touches the keys of ONE bucket, which share a hash tag (one cluster slot;
-- streamsaver/core/keys.py):
--   KEYS[1] mlog  stream: the bucket's memory events, the only source of truth
--   KEYS[2] mix   sorted set: score = updated_at (microseconds), member = lp(ns) .. key
--   KEYS[3] mitem hash: lp(ns) .. key -> "<event id> <created us> <updated us> <expires ms>
--                 <ttl ms> <value digest>" (expires/ttl 0: none); 'h' -> the last entry's dg
--                 (shared/common.lua's chain_head reads it), 't' -> the last event's time (us)
--   KEYS[4] mns   hash: namespace -> items it holds (a namespace is listed while > 0)
--   KEYS[5] mexp  sorted set: score = expires (ms), member = lp(ns) .. key, items with a TTL
--   KEYS[6] mvec  hash: lp(ns) .. key -> the item's embeddings (its event's vec), items that
--                 have some: a ranked search reads them beside mitem (store/store_scan.lua), no
--                 event per item
--   KEYS[7] mft   string: the dims of the server's vector index (RediSearch), set by the store's
--                 setup() on a server that has one; configuration, not derived. While it is
--                 set, each vector of an item is also one HASH document of that index,
--                 <prefix>:{tag}:mv:<sha1 of member>:<j> (j from 0), with v (the vector), p (the
--                 sha1 of each namespace the item is under, comma separated: a prefix search is
--                 one TAG match and no user data reaches a query) and m (the member). They are
--                 not in KEYS (their names depend on the item): the setup uses them only on a
--                 standalone server.
--   KEYS[8] mnsz  sorted set: the namespaces of mns, all scored 0: whether a bucket holds a
--                 namespace under a prefix is one ZRANGEBYLEX, not a read of every namespace
--                 (a store of a namespace per user has thousands a bucket). A bucket written
--                 before it existed has mns alone: its first write that adds or removes a
--                 namespace fills it from mns, and reads look at mns until then.
-- A namespace is its labels joined by '.', which no label holds, so it is one string; lp()
-- makes ns .. key prefix-free whatever either holds.
--
-- Event fields (one XADD each): k 'mput' | 'mdel' | 'mtouch', sv, ns, key, at (us, the
-- server's clock at write); for mput vt/v (the serde's type and bytes), vd (sha1 of
-- lp(vt) .. v) and ttl (ms, '' none); od (the digest of the value replaced or deleted, ''
-- none); who wrote it: thread, run, node (optional); why ('expired' for a TTL sweep's mdel);
-- for mtouch, of (the event id of the value the read saw); then ch/dg (chain).

local STORE_SCHEMA = 1

-- "<eid> <created> <updated> <expires> <ttl> <vd>" -> table
local function item_of(raw)
  if not raw then
    return nil
  end
  local eid, created, updated, expires, ttl, vd =
    string.match(raw, '^(%S+) (%d+) (%d+) (%d+) (%d+) (%S*)$')
  if not eid then
    return nil
  end
  return { eid = eid, created = created, updated = updated, expires = tonumber(expires),
           ttl = tonumber(ttl), vd = vd }
end

local function item_raw(it)
  return it.eid .. ' ' .. it.created .. ' ' .. it.updated .. ' ' ..
    string.format('%d', it.expires) .. ' ' .. string.format('%d', it.ttl) .. ' ' .. it.vd
end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The vector index's dims when keys[6] (mft) says the documents are kept, else nil
local function vector_dims(keys)
  return keys[6] and tonumber(redis.call('GET', keys[6]) or '')
end

local function vector_doc(keys, member, j)
  -- '<prefix>:{tag}:mft' -> '<prefix>:{tag}:mv:...': the index's key prefix of the bucket
  return string.sub(keys[6], 1, -4) .. 'mv:' .. redis.sha1hex(member) .. ':' .. j
end

-- how many vectors of dims an item's vec holds: none for a vector of another size (an index
-- since reconfigured), as the client's ranking counts it
local function vector_count(vec, dims)
  if not vec or vec == '' or #vec % (4 * dims) ~= 0 then
    return 0
  end
  return #vec / (4 * dims)
end

-- 'sha1(a),sha1(a.b),...': every namespace prefix (as a search gives it) the item is under
local function vector_tags(ns)
  local tags, at = {}, 0
  repeat
    at = string.find(ns, '.', at + 1, true)
    tags[#tags + 1] = redis.sha1hex(string.sub(ns, 1, (at or 0) - 1))
  until not at
  return table.concat(tags, ',')
end

local function vector_docs(keys, dims, member, vec)
  local width, tags = 4 * dims, vector_tags((split_lp(member)))
  local docs = {}
  for j = 0, vector_count(vec, dims) - 1 do
    docs[#docs + 1] = { vector_doc(keys, member, j), string.sub(vec, j * width + 1,
                                                                (j + 1) * width), tags }
  end
  return docs
end

-- Make an item's documents those of vec (none for nil or ''): each written, then those past
-- them deleted, the old vectors' (old: the vec they were written from, if known) and any left
-- beyond (a hand edit, which verify reports as extra).
local function set_vector_docs(keys, dims, member, vec, old)
  local docs = (vec and vec ~= '') and vector_docs(keys, dims, member, vec) or {}
  for _, doc in ipairs(docs) do
    redis.call('HSET', doc[1], 'v', doc[2], 'p', doc[3], 'm', member)
  end
  local n, j = vector_count(old, dims), #docs
  while redis.call('DEL', vector_doc(keys, member, j)) == 1 or j < n do
    j = j + 1
  end
end

-- the item's documents (written from vec), and any left past them
local function drop_vector_docs(keys, dims, member, vec)
  set_vector_docs(keys, dims, member, nil, vec)
end

-- Whether an item is live at now_ms: reads leave out items whose TTL ran out, as though the
-- sweep had deleted them already.
local function item_alive(it, now_ms)
  return it and (it.expires == 0 or it.expires > now_ms)
end

-- Whether namespace ns is prefix or under it.
local function under(ns, prefix)
  return prefix == '' or ns == prefix or string.sub(ns, 1, #prefix + 1) == prefix .. '.'
end

-- An item as a read returns it: {created, updated, vt, v, event id, ttl ms[, vec]}, its value
-- from its event in log; nil when the log no longer holds that event.
local function item_row(log, it, vec)
  local found = redis.call('XRANGE', log, it.eid, it.eid)[1]
  if not found then
    return nil
  end
  local f = fields_of(found[2])
  local row = { it.created, it.updated, f.vt, f.v, it.eid, string.format('%d', it.ttl) }
  if vec then
    row[7] = f.vec or ''
  end
  return row
end

-- A bucket written before mnsz existed gets it from mns, once: every namespace, in chunks
-- (unpack's stack has a limit).
local function namespaces_filled(keys)
  if redis.call('EXISTS', keys[7]) == 1 then
    return
  end
  local names = redis.call('HKEYS', keys[3])
  for i = 1, #names, 1000 do
    local args = {}
    for j = i, math.min(i + 999, #names) do
      args[#args + 1] = 0
      args[#args + 1] = names[j]
    end
    redis.call('ZADD', keys[7], unpack(args))
  end
end

-- Whether the bucket (its mns and mnsz) holds a namespace that is prefix or under it ('':
-- any).
local function holds_prefix(mns, mnsz, prefix)
  if prefix == '' then
    return redis.call('EXISTS', mns) == 1
  end
  if redis.call('EXISTS', mnsz) == 0 then
    -- written before mnsz existed (or empty)
    for _, ns in ipairs(redis.call('HKEYS', mns)) do
      if under(ns, prefix) then
        return true
      end
    end
    return false
  end
  -- '.' joins labels and no UTF-8 text holds byte 255
  local under_it = redis.call('ZRANGEBYLEX', mnsz, '[' .. prefix .. '.',
                              '[' .. prefix .. '.\255', 'LIMIT', 0, 1)
  return redis.call('ZSCORE', mnsz, prefix) ~= false or #under_it > 0
end

-- Apply one memory event to the indexes in keys (mix, mitem, mns, mexp, mvec, mft or nil,
-- mnsz); returns
-- nil, or a reason it was skipped (replay reports it; the writer never sends such an event).
local function store_apply(keys, eid, f)
  local mix, mitem, mns, mexp, mvec = keys[1], keys[2], keys[3], keys[4], keys[5]
  if f.dg then
    redis.call('HSET', mitem, 'h', f.dg)
  end
  if tonumber(f.sv or '') ~= STORE_SCHEMA then
    return 'schema ' .. tostring(f.sv) .. ' (from a newer streamsaver?)'
  end
  local at = tonumber(f.at or '')
  if not (f.ns and f.key and at) then
    return 'malformed (no ns, key or at)'
  end
  redis.call('HSET', mitem, 't', f.at)
  local member = lp(f.ns) .. f.key
  local old = item_of(redis.call('HGET', mitem, member))
  if f.k == 'mput' then
    local ttl = tonumber(f.ttl or '') or 0
    local it = { eid = eid, created = old and old.created or f.at, updated = f.at,
                 expires = ttl > 0 and math.floor(at / 1000) + ttl or 0, ttl = ttl,
                 vd = f.vd or '' }
    if not old and redis.call('HINCRBY', mns, f.ns, 1) == 1 then
      namespaces_filled(keys)
      redis.call('ZADD', keys[7], 0, f.ns)
    end
    redis.call('HSET', mitem, member, item_raw(it))
    redis.call('ZADD', mix, at, member)
    if it.expires > 0 then
      redis.call('ZADD', mexp, it.expires, member)
    else
      redis.call('ZREM', mexp, member)
    end
    local dims = vector_dims(keys)
    if dims then
      set_vector_docs(keys, dims, member, f.vec, redis.call('HGET', mvec, member))
    end
    if f.vec and f.vec ~= '' then
      redis.call('HSET', mvec, member, f.vec)
    else
      redis.call('HDEL', mvec, member)
    end
  elseif f.k == 'mdel' then
    if old then
      redis.call('HDEL', mitem, member)
      redis.call('ZREM', mix, member)
      redis.call('ZREM', mexp, member)
      local dims = vector_dims(keys)
      if dims then
        drop_vector_docs(keys, dims, member, redis.call('HGET', mvec, member))
      end
      redis.call('HDEL', mvec, member)
      if redis.call('HINCRBY', mns, f.ns, -1) <= 0 then
        redis.call('HDEL', mns, f.ns)
        namespaces_filled(keys)
        redis.call('ZREM', keys[7], f.ns)
      end
    end
  elseif f.k == 'mtouch' then
    -- a read refreshed the item's TTL: only its expiry moves, and only if it still is the
    -- value the read saw
    if old and old.ttl > 0 and old.eid == f.of then
      old.expires = math.floor(at / 1000) + old.ttl
      redis.call('HSET', mitem, member, item_raw(old))
      redis.call('ZADD', mexp, old.expires, member)
    end
  else
    return 'unknown kind ' .. tostring(f.k) .. ' (from a newer streamsaver?)'
  end
  return nil
end

-- What an event says about the item before it, or about itself, that the replay so far
-- contradicts (verify's "ref" lines): a put's vd must be its value's digest, od the digest of
-- the value it replaced (a removed or altered event breaks it), a touch's `of` the item's event
local function store_refs(keys, eid, f)
  local member = f.ns and f.key and (lp(f.ns) .. f.key)
  if not member or tonumber(f.sv or '') ~= STORE_SCHEMA then
    return nil
  end
  local old = item_of(redis.call('HGET', keys[2], member))
  local vt = f.vt or ''
  if f.k == 'mput' and f.vd ~= redis.sha1hex(#vt .. ':' .. vt .. (f.v or '')) then
    return 'ref ' .. eid .. ' vd is not the digest of its value'
  end
  if (f.k == 'mput' or f.k == 'mdel') and (f.od or '') ~= (old and old.vd or '') then
    return 'ref ' .. eid .. ' od is not the digest of the value before it'
  end
  if f.k == 'mtouch' and not (old and old.eid == f.of) then
    return 'ref ' .. eid .. ' touches ' .. tostring(f.of) .. ', not the item\'s value'
  end
  return nil
end
