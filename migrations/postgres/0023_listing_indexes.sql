-- Listings over many finished jobs (issue 42): jobs by when they became
-- active (their start, else their submission), so that a narrow time
-- window's page is read through an index (`narrowed`), as the index on end
-- time does from the other side. The index on an array task's array id
-- takes SQLite's new name; it stays an index of every row here
-- (PostgreSQL's statistics count NULLs apart, so the planner is not misled
-- by them as SQLite's was).
DROP INDEX IF EXISTS jobs_by_array;
CREATE INDEX jobs_by_array_task ON jobs(((spec::jsonb #>> '{array_task,array_job_id}')::bigint));
CREATE INDEX jobs_by_active_from ON jobs((coalesce(start_time, submit_time)));
