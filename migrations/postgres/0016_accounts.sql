-- Accounts, associations and their decayed usage (sacctmgr, sshare, the
-- fair-share factor): one row, JSON, replaced at each change.
CREATE TABLE accounts (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    data TEXT NOT NULL
);
