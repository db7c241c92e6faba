-- The gsched releases that have opened this database, oldest first: what
-- wrote it, for upgrades and support (docs/install.md).
CREATE TABLE releases (
    release      TEXT PRIMARY KEY,
    protocol     BIGINT NOT NULL,
    first_opened BIGINT NOT NULL
);
