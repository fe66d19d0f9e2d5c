-- Rate-limit budgets, and the keys jobs draw on.
ALTER TABLE sluice_jobs
  ADD COLUMN rate_keys TEXT NULL,
  ADD COLUMN wait_key VARCHAR(255) NULL,
  ADD KEY sluice_jobs_waiting (wait_key, state, priority, id);
CREATE TABLE sluice_budgets (
  name VARCHAR(255) NOT NULL,
  tat BIGINT NOT NULL DEFAULT 0,
  next_slot BIGINT NOT NULL DEFAULT 0,
  interval_us BIGINT NOT NULL DEFAULT 0,
  burst INT NOT NULL DEFAULT 0,
  parked INT NOT NULL DEFAULT 0,
  updated_at BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (name),
  KEY sluice_budgets_parked (parked, next_slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
