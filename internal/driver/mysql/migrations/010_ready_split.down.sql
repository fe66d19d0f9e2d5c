ALTER TABLE sluice_jobs
  ADD COLUMN ready_queue VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'ready', queue, NULL)) STORED,
  DROP KEY sluice_jobs_ready_plain,
  DROP KEY sluice_jobs_ready_limited,
  DROP COLUMN ready_plain,
  DROP COLUMN ready_limited,
  ADD KEY sluice_jobs_ready (ready_queue, priority, id);
