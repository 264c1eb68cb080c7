-- Rebuild a bucket's indexes by replaying its log through store_apply().
-- KEYS: mlog mix mitem mns mexp mvec mft   ARGV[1] (optional): the vector index's dims, to keep
-- its documents from now on (the store's setup, store.lua)
-- Returns {applied, skipped, "<id> <reason>"...}
return store_replay_into(KEYS[1], { KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7] },
  false, ARGV[1])
