-- Replay a bucket's log into scratch keys and compare them with its live indexes.
-- KEYS: mlog mix mitem mns mexp mvec, then the five scratch keys (same slot), then mft
-- Returns {applied, skipped, "<id> <reason>" per skipped event, "ref <id> ..." per event the
-- replay contradicts (store.lua's store_refs), "<index> <missing|differs|extra> <member>"...};
-- the scratch keys are deleted again. While mft is set, each item's vector documents (store.lua)
-- are compared with its replayed vectors too: "mv <missing|differs|extra> <member>".
local live = { KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6] }
local scratch = { KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11] }
local names = { 'mix', 'mitem', 'mns', 'mexp', 'mvec' }
local out = store_replay_into(KEYS[1], scratch, true)

local function as_map(key, kind)
  local flat = kind == 'zset' and redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    or redis.call('HGETALL', key)
  return fields_of(flat)
end

for i = 1, 5 do
  local kind = (i == 1 or i == 4) and 'zset' or 'hash'
  local want, have = as_map(scratch[i], kind), as_map(live[i], kind)
  for member, value in pairs(want) do
    if have[member] == nil then
      out[#out + 1] = names[i] .. ' missing ' .. member
    elseif have[member] ~= value then
      out[#out + 1] = names[i] .. ' differs ' .. member
    end
  end
  for member, _ in pairs(have) do
    if want[member] == nil then
      out[#out + 1] = names[i] .. ' extra ' .. member
    end
  end
end
local dims = vector_dims({ nil, nil, nil, nil, nil, KEYS[12] })
if dims then
  local live_keys = { nil, nil, nil, nil, nil, KEYS[12] }
  local want, have = as_map(scratch[5], 'hash'), as_map(live[5], 'hash')
  for member, vec in pairs(want) do
    local docs = vector_docs(live_keys, dims, member, vec)
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
    if redis.call('EXISTS', vector_doc(live_keys, member, #docs)) == 1 then
      out[#out + 1] = 'mv extra ' .. member
    end
  end
  for member, _ in pairs(have) do
    if want[member] == nil and redis.call('EXISTS', vector_doc(live_keys, member, 0)) == 1 then
      out[#out + 1] = 'mv extra ' .. member
    end
  end
end
redis.call('DEL', unpack(scratch))
return out
