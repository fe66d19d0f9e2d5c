-- The error of every failed run of a job, kept with the job (the job's
-- last_error is only the last one's) and deleted with it.
CREATE TABLE sluice_attempts (
  job_id BIGINT NOT NULL,
  attempt INT NOT NULL,
  error MEDIUMTEXT NOT NULL,
  failed_at BIGINT NOT NULL,
  KEY sluice_attempts_job (job_id, attempt)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
