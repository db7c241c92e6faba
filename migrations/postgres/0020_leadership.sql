-- Which controller leads (issue 40): one row, the lease with its fencing
-- epoch (gsched_core::leadership). Every commit of the leader checks the
-- epoch and counts itself in `written`.
CREATE TABLE leadership (
    id          BIGINT PRIMARY KEY CHECK (id = 1),
    epoch       BIGINT NOT NULL,
    holder      TEXT    NOT NULL,
    address     TEXT    NOT NULL,
    expires_ms  BIGINT NOT NULL,   -- the database's clock, unix ms
    written     BIGINT NOT NULL DEFAULT 0
);
