-- Coalescing: a row per coalesce key, which a call locks first (on
-- PostgreSQL and MySQL; SQLite's transactions hold the only write lock),
-- creating it on first use; the row points to the key's job (job_id),
-- which the call reads through the primary key. The rows of today's
-- pending jobs are made here; those whose job released its key are deleted
-- hourly.
CREATE TABLE sluice_coalesce_keys (name TEXT PRIMARY KEY, job_id INTEGER);
INSERT INTO sluice_coalesce_keys (name, job_id)
SELECT coalesce_key, id FROM sluice_jobs WHERE coalesce_key IS NOT NULL;
