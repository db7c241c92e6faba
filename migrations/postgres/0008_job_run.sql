-- The run generation: one more at each launch; a node's report about an
-- earlier run changes nothing.
ALTER TABLE jobs ADD COLUMN run BIGINT NOT NULL DEFAULT 0;
