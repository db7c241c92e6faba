-- The other nodes of a job on several (`-N`), after its batch node: JSON
-- list of {node, instances}.
ALTER TABLE jobs ADD COLUMN sisters TEXT;
