-- Parked fair jobs come back in fair order (docs/fairness.md): a budget's
-- parked jobs are two streams, each through an index of its own, as ready
-- jobs are (migration 013): those without a fairness key by (priority, id),
-- and fair ones by (priority, fair_start, id). Unparking merges the two at
-- their heads by (priority, id), as a claim merges its streams.
DROP INDEX sluice_jobs_parked;
CREATE INDEX sluice_jobs_parked ON sluice_jobs (wait_key, priority, id) WHERE state = 'parked' AND fair_key IS NULL;
CREATE INDEX sluice_jobs_parked_fair ON sluice_jobs (wait_key, priority, fair_start, id) WHERE state = 'parked' AND fair_key IS NOT NULL;
