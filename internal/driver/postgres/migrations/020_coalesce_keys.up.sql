-- Coalescing: a row per coalesce key, which a call locks first, in key
-- order, creating it on first use, so that no other call creates or joins
-- a pending job of the key meanwhile (a call that kept losing the race to
-- create it, to claims that took each winner's job, failed after five
-- tries); the row points to the key's job (job_id), which the call locks
-- through the primary key. The rows of today's pending jobs are made here;
-- those whose job released its key are deleted hourly. (On MySQL this
-- also ends deadlocks: see its 020.)
CREATE TABLE sluice_coalesce_keys (name text PRIMARY KEY, job_id bigint);
INSERT INTO sluice_coalesce_keys (name, job_id)
SELECT coalesce_key, id FROM sluice_jobs WHERE coalesce_key IS NOT NULL;
