-- Concurrency limits: a semaphore per key, and the slot each job holds.
ALTER TABLE sluice_jobs ADD COLUMN conc_key TEXT;
ALTER TABLE sluice_jobs ADD COLUMN conc_limit INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sluice_jobs ADD COLUMN conc_duration INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sluice_jobs ADD COLUMN conc_discard INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sluice_jobs ADD COLUMN holds_slot INTEGER NOT NULL DEFAULT 0;
CREATE INDEX sluice_jobs_blocked ON sluice_jobs (conc_key, priority, id) WHERE state = 'blocked';
CREATE INDEX sluice_jobs_holding ON sluice_jobs (conc_key) WHERE holds_slot = 1;
CREATE TABLE sluice_semaphores (
  name TEXT PRIMARY KEY,
  value INTEGER NOT NULL DEFAULT 0,
  limit_to INTEGER NOT NULL DEFAULT 0,
  duration_us INTEGER NOT NULL DEFAULT 0,
  expires_at INTEGER NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX sluice_semaphores_expires ON sluice_semaphores (expires_at) WHERE value < limit_to;
