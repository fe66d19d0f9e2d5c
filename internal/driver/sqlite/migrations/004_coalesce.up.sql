-- Coalescing: the key a pending job holds, and the calls it collected.
ALTER TABLE sluice_jobs ADD COLUMN coalesce_key TEXT;
ALTER TABLE sluice_jobs ADD COLUMN calls INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sluice_jobs ADD COLUMN first_call_at INTEGER;
CREATE UNIQUE INDEX sluice_jobs_coalesce ON sluice_jobs (coalesce_key) WHERE coalesce_key IS NOT NULL;
CREATE TABLE sluice_calls (
  job_id INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  args TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (job_id, seq)
);
