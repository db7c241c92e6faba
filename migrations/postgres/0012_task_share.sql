-- The compute demand a task was placed with: thousandths of a whole GPU
-- (its job's --gpu-share, the share learned from earlier runs, or the
-- node's default). 0 for tasks recorded before demands existed.
ALTER TABLE task_reservations ADD COLUMN gpu_share BIGINT NOT NULL DEFAULT 0;
