-- Listings over many finished jobs (issue 42): jobs by when they became
-- active (their start, else their submission), so that a narrow time
-- window's page is read through an index (`narrowed`), as the index on end
-- time does from the other side. (PostgreSQL's statistics count NULLs
-- apart, so its index on the array id, 0021, stays as it is.)
CREATE INDEX jobs_by_active_from ON jobs((coalesce(start_time, submit_time)));
