-- An administrator's drain or down of a node (scontrol update NodeName=...
-- State=DRAIN|DOWN Reason=...), kept across controller restarts.
ALTER TABLE nodes ADD COLUMN admin_state  TEXT;     -- NULL, 'drain' or 'down'
ALTER TABLE nodes ADD COLUMN admin_reason TEXT;
ALTER TABLE nodes ADD COLUMN admin_by     TEXT;      -- the administrator's user name
ALTER TABLE nodes ADD COLUMN admin_since  BIGINT;
