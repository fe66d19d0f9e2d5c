-- Coalescing: a row per coalesce key, which MySQL's calls lock before they
-- look for the key's pending job (InnoDB locks index entries apart from
-- rows). PostgreSQL and SQLite lock rows only, so their calls lock the
-- pending job through the coalesce index and never use this table; it is
-- here so that every database has the same tables.
CREATE TABLE sluice_coalesce_keys (name text PRIMARY KEY);
