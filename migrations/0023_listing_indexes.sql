-- Listings over many finished jobs (issue 42). The index on an array
-- task's array id holds array tasks only: on a table of mostly other jobs,
-- an index of every row is mostly NULL, and once the table is analyzed
-- SQLite's statistics (rows per key, NULL included) make it look useless,
-- so `sacct -j N` read every row. Jobs by when they became active (their
-- start, else their submission) let a narrow time window's page be read
-- through an index (`narrowed`), as the index on end time does from the
-- other side.
DROP INDEX IF EXISTS jobs_by_array;
CREATE INDEX jobs_by_array_task ON jobs(json_extract(spec, '$.array_task.array_job_id'))
  WHERE json_extract(spec, '$.array_task.array_job_id') IS NOT NULL;
CREATE INDEX jobs_by_active_from ON jobs(coalesce(start_time, submit_time));
