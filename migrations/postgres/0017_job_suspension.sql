-- The current run's suspensions (scontrol suspend, PreemptMode=SUSPEND):
-- JSON {since, for_job, secs}; NULL when it was never suspended.
ALTER TABLE jobs ADD COLUMN suspension TEXT;
