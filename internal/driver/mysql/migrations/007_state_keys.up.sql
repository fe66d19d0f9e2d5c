-- Partial indexes, MySQL's way. A key that leads with state changes on
-- every move between states, in every index that holds it, for every job.
-- Instead each generated column below holds a value only while a job is in
-- one state (and, for wait and concurrency keys, only for jobs that have
-- them), so a move touches the keys of the two states it leaves and enters,
-- and a job with no rate or concurrency limit never touches those keys.
-- PostgreSQL and SQLite use partial indexes for the same.
ALTER TABLE sluice_jobs
  ADD COLUMN ready_queue VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'ready', queue, NULL)) STORED,
  ADD COLUMN due_at BIGINT GENERATED ALWAYS AS (IF(state = 'scheduled', run_at, NULL)) STORED,
  ADD COLUMN running_process BIGINT GENERATED ALWAYS AS (IF(state = 'running', process_id, NULL)) STORED,
  ADD COLUMN done_at BIGINT GENERATED ALWAYS AS (IF(state IN ('completed', 'cancelled'), finished_at, NULL)) STORED,
  ADD COLUMN failed_queue VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'failed', queue, NULL)) STORED,
  ADD COLUMN parked_key VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'parked', wait_key, NULL)) STORED,
  ADD COLUMN blocked_key VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'blocked', conc_key, NULL)) STORED,
  DROP KEY sluice_jobs_ready,
  DROP KEY sluice_jobs_scheduled,
  DROP KEY sluice_jobs_running,
  DROP KEY sluice_jobs_finished,
  DROP KEY sluice_jobs_waiting,
  DROP KEY sluice_jobs_blocked,
  ADD KEY sluice_jobs_ready (ready_queue, priority, id),
  ADD KEY sluice_jobs_scheduled (due_at, id),
  ADD KEY sluice_jobs_running (running_process),
  ADD KEY sluice_jobs_finished (done_at),
  ADD KEY sluice_jobs_failed (failed_queue),
  ADD KEY sluice_jobs_parked (parked_key, priority, id),
  ADD KEY sluice_jobs_blocked (blocked_key, priority, id),
  ADD KEY sluice_jobs_waiting (wait_key),
  ADD KEY sluice_jobs_conc (conc_key);
