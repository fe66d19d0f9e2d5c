DROP TABLE sluice_semaphores;
ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_blocked,
  DROP COLUMN holds_slot,
  DROP COLUMN conc_discard,
  DROP COLUMN conc_duration,
  DROP COLUMN conc_limit,
  DROP COLUMN conc_key;
