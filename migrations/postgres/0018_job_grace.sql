-- A preempted job in its QOS's grace time: JSON {since, until, requeue,
-- for_job}; NULL otherwise.
ALTER TABLE jobs ADD COLUMN grace TEXT;
