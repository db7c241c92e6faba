-- The steps `srun` started inside each job (JSON array), for sacct's ID.N rows.
ALTER TABLE jobs ADD COLUMN steps TEXT NOT NULL DEFAULT '[]';
