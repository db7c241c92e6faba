-- Task reservations as nodes report them: one row per (job, task), begun
-- and, once released, ended. Times are unix milliseconds.
ALTER TABLE task_reservations ADD COLUMN node TEXT;
ALTER TABLE task_reservations ADD COLUMN pid  BIGINT;
CREATE UNIQUE INDEX task_reservations_job_task ON task_reservations(job_id, task);
