-- Concurrency limits: a semaphore per key, and the slot each job holds.
ALTER TABLE sluice_jobs
  ADD COLUMN conc_key text,
  ADD COLUMN conc_limit integer NOT NULL DEFAULT 0,
  ADD COLUMN conc_duration bigint NOT NULL DEFAULT 0,
  ADD COLUMN conc_discard boolean NOT NULL DEFAULT false,
  ADD COLUMN holds_slot boolean NOT NULL DEFAULT false;
CREATE INDEX sluice_jobs_blocked ON sluice_jobs (conc_key, priority, id) WHERE state = 'blocked';
CREATE INDEX sluice_jobs_holding ON sluice_jobs (conc_key) WHERE holds_slot;
CREATE TABLE sluice_semaphores (
  name text PRIMARY KEY,
  value integer NOT NULL DEFAULT 0,
  limit_to integer NOT NULL DEFAULT 0,
  duration_us bigint NOT NULL DEFAULT 0,
  expires_at bigint NOT NULL DEFAULT 0,
  updated_at bigint NOT NULL DEFAULT 0
);
CREATE INDEX sluice_semaphores_expires ON sluice_semaphores (expires_at) WHERE value < limit_to;
