-- GPUs of a node whose MIG layout an administrator froze (gsched mig
-- freeze): the re-partitioning policy leaves them alone. Comma-separated
-- GPU indices, NULL for none.
ALTER TABLE nodes ADD COLUMN mig_frozen TEXT;
