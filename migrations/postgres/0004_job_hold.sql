-- A pending job held by its user (`sbatch --hold`, `scontrol hold`): it does
-- not start until released.
ALTER TABLE jobs ADD COLUMN held BOOLEAN NOT NULL DEFAULT false;
