-- Finished jobs leave the controller's memory after MinJobAge; the store
-- answers for them (sacct), by end time and by owner.
CREATE INDEX jobs_by_end ON jobs(end_time);
