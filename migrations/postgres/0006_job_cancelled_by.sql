-- The uid of whoever cancelled the job (sacct's `CANCELLED by UID`).
ALTER TABLE jobs ADD COLUMN cancelled_by BIGINT;
