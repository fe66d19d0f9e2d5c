-- Coalescing: the key a pending job holds, and the calls it collected.
ALTER TABLE sluice_jobs
  ADD COLUMN coalesce_key text,
  ADD COLUMN calls integer NOT NULL DEFAULT 1,
  ADD COLUMN first_call_at bigint;
CREATE UNIQUE INDEX sluice_jobs_coalesce ON sluice_jobs (coalesce_key) WHERE coalesce_key IS NOT NULL;
CREATE TABLE sluice_calls (
  job_id bigint NOT NULL,
  seq integer NOT NULL,
  args text NOT NULL,
  created_at bigint NOT NULL,
  PRIMARY KEY (job_id, seq)
);
