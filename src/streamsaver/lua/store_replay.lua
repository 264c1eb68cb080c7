-- Rebuild a bucket's indexes by replaying its log through store_apply().
-- KEYS: mlog mix mitem mns mexp mvec   Returns {applied, skipped, "<id> <reason>"...}
return store_replay_into(KEYS[1], { KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6] })
