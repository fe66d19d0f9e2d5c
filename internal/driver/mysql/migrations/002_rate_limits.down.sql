DROP TABLE sluice_budgets;
ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_waiting,
  DROP COLUMN wait_key,
  DROP COLUMN rate_keys;
