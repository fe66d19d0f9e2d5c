-- Recurring tasks: one row per task and tick, so that each tick runs once
-- however many dispatchers run.
CREATE TABLE sluice_recurring_runs (
  task text NOT NULL,
  run_at bigint NOT NULL,
  ran_at bigint NOT NULL,
  job_id bigint,
  PRIMARY KEY (task, run_at)
);
