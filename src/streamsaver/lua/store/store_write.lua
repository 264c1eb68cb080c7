-- Append a batch of puts and deletes of one bucket to its log and project each, atomically.
-- KEYS: mlog mix mitem mns mexp mvec mft mnsz (store/store.lua)   ARGV[2]: 'chain' or '' (shared/common.lua's append_event)
-- ARGV[1]: 0, where shared/common.lua's convention puts the feed's MAXLEN: memory events are not
--          announced on the feeds yet (docs/store.md)
-- ARGV[3..]: per operation 10 values: kind ('mput' | 'mdel'), ns, key, vt, v, ttl (ms or ''),
-- thread, run, node ('' when unknown), vec (the value's embeddings, float32 LE, '' none). A delete
-- of an item that does not exist changes nothing and appends nothing. Returns the number of events
-- appended.
local keys = { KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8] }
local last = tonumber(redis.call('HGET', KEYS[3], 't') or '0')
local now = now_us()
local appended = 0
for i = 3, #ARGV, 10 do
  local kind, ns, key = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local old = item_of(redis.call('HGET', KEYS[3], lp(ns) .. key))
  if kind == 'mput' or old then
    -- strictly increasing within the bucket, so two writes of one batch still order
    if now <= last then
      now = last + 1
    end
    last = now
    local at = string.format('%d', now)
    local fields = { 'k', kind, 'sv', tostring(STORE_SCHEMA), 'ns', ns, 'key', key, 'at', at }
    if kind == 'mput' then
      local vt, v = ARGV[i + 3], ARGV[i + 4]
      for _, x in ipairs({ 'vt', vt, 'v', v, 'vd', redis.sha1hex(#vt .. ':' .. vt .. v),
                           'ttl', ARGV[i + 5] }) do
        fields[#fields + 1] = x
      end
      if ARGV[i + 9] ~= '' then
        fields[#fields + 1] = 'vec'
        fields[#fields + 1] = ARGV[i + 9]
      end
    end
    fields[#fields + 1] = 'od'
    fields[#fields + 1] = old and old.vd or ''
    for j, name in ipairs({ 'thread', 'run', 'node' }) do
      if ARGV[i + 5 + j] ~= '' then
        fields[#fields + 1] = name
        fields[#fields + 1] = ARGV[i + 5 + j]
      end
    end
    local id = append_event(KEYS[1], fields)
    store_apply(keys, id, fields_of(fields))
    appended = appended + 1
  end
end
return appended
