-- Ready jobs in two indexes: those a rate limit must admit, and the rest.
-- A claim takes the two as separate streams, so a flood of limited jobs
-- at the head of a queue is never walked over to reach the jobs behind it.
ALTER TABLE sluice_jobs
  ADD COLUMN ready_plain VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'ready' AND rate_keys IS NULL, queue, NULL)) STORED,
  ADD COLUMN ready_limited VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'ready' AND rate_keys IS NOT NULL, queue, NULL)) STORED,
  DROP KEY sluice_jobs_ready,
  DROP COLUMN ready_queue,
  ADD KEY sluice_jobs_ready_plain (ready_plain, priority, id),
  ADD KEY sluice_jobs_ready_limited (ready_limited, priority, id);
