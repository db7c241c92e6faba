-- gsched controller store, version 1.

CREATE TABLE jobs (
    id            INTEGER PRIMARY KEY,
    name          TEXT    NOT NULL,
    user_name     TEXT    NOT NULL,
    uid           INTEGER NOT NULL,
    gid           INTEGER NOT NULL,
    working_dir   TEXT    NOT NULL,
    script        TEXT    NOT NULL,            -- copy taken at submit time
    environment   TEXT    NOT NULL,            -- JSON object
    isolated      INTEGER NOT NULL,
    gpu_request   TEXT    NOT NULL,            -- JSON: {"mig_profile", "mem_mib"}
    time_limit    INTEGER,                     -- seconds; NULL is unlimited
    partition     TEXT,
    spec          TEXT    NOT NULL,            -- the full spec less script and environment, JSON
    state         TEXT    NOT NULL,
    reason        TEXT,
    exit_code     INTEGER,
    exit_signal   INTEGER,
    submit_time   INTEGER NOT NULL,
    start_time    INTEGER,
    end_time      INTEGER,
    node          TEXT,
    gpu_instance  TEXT,
    gpu_mem_peak  INTEGER,                     -- MiB
    restarts      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_by_state ON jobs(state);
CREATE INDEX jobs_by_user ON jobs(user_name);

CREATE TABLE nodes (
    name          TEXT PRIMARY KEY,
    url           TEXT    NOT NULL,
    cpus          INTEGER NOT NULL,
    memory_mib    INTEGER NOT NULL,
    worker_limit  INTEGER NOT NULL,
    up            INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);

CREATE TABLE gpu_instances (
    uuid           TEXT PRIMARY KEY,
    node           TEXT    NOT NULL REFERENCES nodes(name) ON DELETE CASCADE,
    gpu_index      INTEGER NOT NULL,
    gpu_uuid       TEXT    NOT NULL,
    model          TEXT    NOT NULL,
    profile        TEXT,                       -- NULL: whole GPU
    memory_mib     INTEGER NOT NULL,
    sms            INTEGER NOT NULL,
    compute_slices INTEGER NOT NULL
);
CREATE INDEX gpu_instances_by_node ON gpu_instances(node);

-- One row per probed GPU task (filled by the probe layer).
CREATE TABLE task_reservations (
    id          INTEGER PRIMARY KEY,
    job_id      INTEGER NOT NULL REFERENCES jobs(id),
    task        INTEGER NOT NULL,
    instance    TEXT    NOT NULL,
    mem_bytes   INTEGER NOT NULL,
    warps       INTEGER NOT NULL,
    begin_time  INTEGER NOT NULL,
    end_time    INTEGER
);
CREATE INDEX task_reservations_by_job ON task_reservations(job_id);

-- Append-only log of everything that happened.
CREATE TABLE events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    time    INTEGER NOT NULL,
    job_id  INTEGER,
    node    TEXT,
    kind    TEXT    NOT NULL,
    detail  TEXT
);
CREATE INDEX events_by_job ON events(job_id);
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
