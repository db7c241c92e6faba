-- The run generation: one more at each launch; a node's report about an
-- earlier run changes nothing.
ALTER TABLE jobs ADD COLUMN run INTEGER NOT NULL DEFAULT 0;
