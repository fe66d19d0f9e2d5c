-- Coalescing without deadlocks. InnoDB locks a secondary index's entries
-- apart from the rows they lead to: a call that found the pending job of
-- its key through the coalesce index locked the entry, then waited for the
-- job, while a claim (or a cancel) that held the job waited for the entry
-- to release the key. And the index's uniqueness made every insert of a
-- key check the entries a released job left, taking a lock on the gap
-- before them that a claim releasing another key (writing NULL there)
-- waited for. A call now takes its key's row in sluice_coalesce_keys
-- first, in key order, so that no other call creates or joins a pending
-- job of the key meanwhile; finds the job with a plain read; and locks it
-- through the primary key. The index, which that row now keeps to one
-- pending job per key, is no longer unique. Key rows are deleted hourly
-- and created again on use. Dropping and adding a secondary index does not
-- rewrite the table.
CREATE TABLE sluice_coalesce_keys (
  name VARCHAR(255) NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_coalesce,
  ADD KEY sluice_jobs_coalesce (coalesce_key);
