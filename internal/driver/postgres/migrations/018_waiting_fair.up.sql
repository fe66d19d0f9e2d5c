-- A fair priority level's virtual time with none of its fair jobs ready
-- (docs/fairness.md) is no later than the lowest start of its fair jobs
-- that wait to be ready (scheduled, parked or blocked), and no earlier
-- than the finish of its latest keys that have none waiting:
-- sluice_jobs_waiting_fair reads the first as its first entry, and
-- sluice_jobs_waiting_fair_key tells whether a key has a job waiting. A
-- concurrency key's freed slot that goes to a blocked fair job goes to the
-- one of its priority with the lowest start: sluice_jobs_blocked_fair
-- reads them in that order. All three leave out every job without a
-- fairness key.
CREATE INDEX sluice_jobs_waiting_fair ON sluice_jobs (queue, priority, fair_start) WHERE state IN ('scheduled', 'parked', 'blocked') AND fair_key IS NOT NULL;
CREATE INDEX sluice_jobs_waiting_fair_key ON sluice_jobs (queue, priority, fair_key) WHERE state IN ('scheduled', 'parked', 'blocked') AND fair_key IS NOT NULL;
CREATE INDEX sluice_jobs_blocked_fair ON sluice_jobs (conc_key, priority, fair_start, id) WHERE state = 'blocked' AND fair_key IS NOT NULL;
