-- Rate-limit budgets, and the keys jobs draw on.
ALTER TABLE sluice_jobs ADD COLUMN rate_keys text;
ALTER TABLE sluice_jobs ADD COLUMN wait_key text;
CREATE INDEX sluice_jobs_parked ON sluice_jobs (wait_key, priority, id) WHERE state = 'parked';
CREATE INDEX sluice_jobs_waiting ON sluice_jobs (wait_key, state) WHERE wait_key IS NOT NULL;
CREATE TABLE sluice_budgets (
  name text PRIMARY KEY,
  tat bigint NOT NULL DEFAULT 0,
  next_slot bigint NOT NULL DEFAULT 0,
  interval_us bigint NOT NULL DEFAULT 0,
  burst integer NOT NULL DEFAULT 0,
  parked integer NOT NULL DEFAULT 0,
  updated_at bigint NOT NULL DEFAULT 0
);
CREATE INDEX sluice_budgets_parked ON sluice_budgets (next_slot) WHERE parked > 0;
