-- CPU time and memory from the job's cgroup (JSON: max_rss, ave_rss,
-- max_vmsize in bytes; user_cpu_usec, system_cpu_usec), for sacct.
ALTER TABLE jobs ADD COLUMN usage TEXT;
