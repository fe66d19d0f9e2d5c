-- Coalescing: the key a pending job holds, and the calls it collected.
ALTER TABLE sluice_jobs
  ADD COLUMN coalesce_key VARCHAR(255) NULL,
  ADD COLUMN calls INT NOT NULL DEFAULT 1,
  ADD COLUMN first_call_at BIGINT NULL,
  ADD UNIQUE KEY sluice_jobs_coalesce (coalesce_key);
CREATE TABLE sluice_calls (
  job_id BIGINT NOT NULL,
  seq INT NOT NULL,
  args LONGTEXT NOT NULL,
  created_at BIGINT NOT NULL,
  PRIMARY KEY (job_id, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
