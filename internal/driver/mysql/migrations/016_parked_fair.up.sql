-- Parked fair jobs come back in fair order (docs/fairness.md): a budget's
-- parked jobs are two streams, each through a generated key of its own, as
-- ready jobs are (migration 013): those without a fairness key
-- (parked_plain, which replaces migration 007's parked_key) by (priority,
-- id), and fair ones (parked_fair) by (priority, fair_start, id).
-- Unparking merges the two at their heads by (priority, id), as a claim
-- merges its streams. One statement, so one rewrite of the table.
ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_parked,
  DROP COLUMN parked_key,
  ADD COLUMN parked_plain VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'parked' AND fair_key IS NULL, wait_key, NULL)) STORED,
  ADD COLUMN parked_fair VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'parked' AND fair_key IS NOT NULL, wait_key, NULL)) STORED,
  ADD KEY sluice_jobs_parked (parked_plain, priority, id),
  ADD KEY sluice_jobs_parked_fair (parked_fair, priority, fair_start, id);
