-- The error of every failed run of a job, kept with the job (the job's
-- last_error is only the last one's) and deleted with it.
CREATE TABLE sluice_attempts (
  job_id BIGINT NOT NULL,
  attempt INT NOT NULL,
  error TEXT NOT NULL,
  failed_at BIGINT NOT NULL
);
CREATE INDEX sluice_attempts_job ON sluice_attempts (job_id, attempt);
