ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_parked_fair,
  DROP KEY sluice_jobs_parked,
  DROP COLUMN parked_fair,
  DROP COLUMN parked_plain,
  ADD COLUMN parked_key VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'parked', wait_key, NULL)) STORED,
  ADD KEY sluice_jobs_parked (parked_key, priority, id);
