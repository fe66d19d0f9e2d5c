-- The error of every failed run of a job, kept with the job (the job's
-- last_error is only the last one's) and deleted with it.
CREATE TABLE sluice_attempts (
  job_id INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  error TEXT NOT NULL,
  failed_at INTEGER NOT NULL
);
CREATE INDEX sluice_attempts_job ON sluice_attempts (job_id, attempt);
