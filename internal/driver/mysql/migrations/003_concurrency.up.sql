-- Concurrency limits: a semaphore per key, and the slot each job holds.
ALTER TABLE sluice_jobs
  ADD COLUMN conc_key VARCHAR(255) NULL,
  ADD COLUMN conc_limit INT NOT NULL DEFAULT 0,
  ADD COLUMN conc_duration BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN conc_discard TINYINT NOT NULL DEFAULT 0,
  ADD COLUMN holds_slot TINYINT NOT NULL DEFAULT 0,
  ADD KEY sluice_jobs_blocked (conc_key, state, priority, id);
CREATE TABLE sluice_semaphores (
  name VARCHAR(255) NOT NULL,
  value INT NOT NULL DEFAULT 0,
  limit_to INT NOT NULL DEFAULT 0,
  duration_us BIGINT NOT NULL DEFAULT 0,
  expires_at BIGINT NOT NULL DEFAULT 0,
  updated_at BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (name),
  KEY sluice_semaphores_expires (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
