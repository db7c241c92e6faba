-- The MPS control daemon of an instance, when its layout asks for one.
ALTER TABLE gpu_instances ADD COLUMN mps_pipe_dir TEXT;   -- NULL: no MPS
ALTER TABLE gpu_instances ADD COLUMN mps_log_dir  TEXT;
ALTER TABLE gpu_instances ADD COLUMN mps_state    TEXT;   -- 'running' or 'down'
