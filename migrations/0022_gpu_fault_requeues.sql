-- How many times a job went back to the queue after a GPU fault tore it
-- down as a bystander (issue 41): bounded by the controller's
-- max_gpu_fault_requeues, across restarts.
ALTER TABLE jobs ADD COLUMN gpu_fault_requeues INTEGER NOT NULL DEFAULT 0;
