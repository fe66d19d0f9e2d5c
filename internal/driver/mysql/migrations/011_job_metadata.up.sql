-- A job's metadata (a JSON object of strings written at enqueue: a trace
-- context, a request id), and how often, why last and since when a claim
-- deferred it on a rate limit. deferred_at is the first deferral since the
-- job last ran.
ALTER TABLE sluice_jobs
  ADD COLUMN metadata TEXT NULL,
  ADD COLUMN deferrals INT NOT NULL DEFAULT 0,
  ADD COLUMN deferral_reason TEXT NULL,
  ADD COLUMN deferred_at BIGINT NULL;
