-- Recurring tasks: one row per task and tick, so that each tick runs once
-- however many dispatchers run.
CREATE TABLE sluice_recurring_runs (
  task TEXT NOT NULL,
  run_at INTEGER NOT NULL,
  ran_at INTEGER NOT NULL,
  job_id INTEGER,
  PRIMARY KEY (task, run_at)
);
