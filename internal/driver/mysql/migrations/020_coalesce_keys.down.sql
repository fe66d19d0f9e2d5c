-- Fails if two jobs hold one coalesce key (a process of the version before
-- 020 may have made them while a deploy rolled); cancel one first.
ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_coalesce,
  ADD UNIQUE KEY sluice_jobs_coalesce (coalesce_key);
DROP TABLE sluice_coalesce_keys;
