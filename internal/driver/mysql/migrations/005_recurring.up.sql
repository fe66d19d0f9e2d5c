-- Recurring tasks: one row per task and tick, so that each tick runs once
-- however many dispatchers run.
CREATE TABLE sluice_recurring_runs (
  task VARCHAR(255) NOT NULL,
  run_at BIGINT NOT NULL,
  ran_at BIGINT NOT NULL,
  job_id BIGINT NULL,
  PRIMARY KEY (task, run_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
