DROP TABLE sluice_fair_keys;
ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_ready_fair,
  DROP KEY sluice_jobs_ready_plain,
  DROP KEY sluice_jobs_ready_limited,
  DROP COLUMN ready_fair,
  DROP COLUMN ready_plain,
  DROP COLUMN ready_limited;
ALTER TABLE sluice_jobs
  DROP COLUMN fair_key,
  DROP COLUMN fair_start,
  ADD COLUMN ready_plain VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'ready' AND rate_keys IS NULL, queue, NULL)) STORED,
  ADD COLUMN ready_limited VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'ready' AND rate_keys IS NOT NULL, queue, NULL)) STORED,
  ADD KEY sluice_jobs_ready_plain (ready_plain, priority, id),
  ADD KEY sluice_jobs_ready_limited (ready_limited, priority, id);
