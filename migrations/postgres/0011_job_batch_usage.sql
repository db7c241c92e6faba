-- What the batch step used, from its own cgroup, without the job's srun
-- steps (JSON like `usage`), for sacct's `.batch` row. Steps' use is in
-- `steps`.
ALTER TABLE jobs ADD COLUMN batch_usage TEXT;
