-- A fair priority level's virtual time with none of its fair jobs ready
-- (docs/fairness.md) is no later than the lowest start of its fair jobs
-- that wait to be ready (scheduled, parked or blocked), and no earlier
-- than the finish of its latest keys that have none waiting. The
-- generated key waiting_fair holds the job's queue in those states only:
-- its index by start reads the first as its first entry, and its index by
-- fairness key tells whether a key has a job waiting. A concurrency key's
-- freed slot that goes to a blocked fair job goes to the one of its
-- priority with the lowest start: blocked_fair holds the job's
-- concurrency key while it is blocked, and its index reads them in that
-- order. Both are NULL for every job without a fairness key, as the other
-- states' keys are outside their state. One statement, so one rewrite of
-- the table.
ALTER TABLE sluice_jobs
  ADD COLUMN waiting_fair VARCHAR(255) GENERATED ALWAYS AS (IF(state IN ('scheduled', 'parked', 'blocked') AND fair_key IS NOT NULL, queue, NULL)) STORED,
  ADD COLUMN blocked_fair VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'blocked' AND fair_key IS NOT NULL, conc_key, NULL)) STORED,
  ADD KEY sluice_jobs_waiting_fair (waiting_fair, priority, fair_start),
  ADD KEY sluice_jobs_waiting_fair_key (waiting_fair, priority, fair_key),
  ADD KEY sluice_jobs_blocked_fair (blocked_fair, priority, fair_start, id);
