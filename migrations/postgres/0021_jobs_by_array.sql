-- Finished array tasks by their array's id (issue 40): `sacct -j N` asks
-- for the tasks of array N, read from the job's spec. The expression is
-- the one the store's queries use (`Engine::array_job_id`), so that the
-- planner takes this index for them.
CREATE INDEX jobs_by_array ON jobs(((spec::jsonb #>> '{array_task,array_job_id}')::bigint));
