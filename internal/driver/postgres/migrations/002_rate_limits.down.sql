DROP TABLE sluice_budgets;
DROP INDEX sluice_jobs_waiting;
DROP INDEX sluice_jobs_parked;
ALTER TABLE sluice_jobs DROP COLUMN wait_key;
ALTER TABLE sluice_jobs DROP COLUMN rate_keys;
