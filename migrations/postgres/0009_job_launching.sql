-- Running, but the node has not confirmed the launch yet (Slurm's
-- CONFIGURING). Written before the launch is sent, so a restarted
-- controller knows the job may never have started.
ALTER TABLE jobs ADD COLUMN launching BOOLEAN NOT NULL DEFAULT false;
