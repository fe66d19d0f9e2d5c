-- Coalescing without deadlocks. A call found the pending job of its key
-- through the coalesce index, with a locking read. InnoDB locks an index's
-- entries apart from the rows they lead to: the call locked the entry,
-- then waited for the job, while a claim (or a cancel) that held the job
-- waited for the entry to release the key. At REPEATABLE READ (an app's
-- own pool) the read also locked the gap around a key with no job, which
-- two calls creating keys in one gap both took before each inserted. And
-- the index's uniqueness made every insert of a key lock the gap before
-- the entries its released jobs left, where a claim releasing another key
-- (writing NULL there) waited. A call now locks its key's row in
-- sluice_coalesce_keys first, in key order, creating it on first use, so
-- that no other call creates or joins a pending job of the key meanwhile;
-- the row points to the key's job (job_id), which the call locks through
-- the primary key. The coalesce index, which the row now keeps to one
-- pending job per key, is no longer unique. The rows of today's pending
-- jobs are made here; those whose job released its key are deleted
-- hourly. Dropping and adding a secondary index does not rewrite the
-- table.
CREATE TABLE sluice_coalesce_keys (
  name VARCHAR(255) NOT NULL,
  job_id BIGINT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO sluice_coalesce_keys (name, job_id)
SELECT coalesce_key, id FROM sluice_jobs WHERE coalesce_key IS NOT NULL;
ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_coalesce,
  ADD KEY sluice_jobs_coalesce (coalesce_key);
