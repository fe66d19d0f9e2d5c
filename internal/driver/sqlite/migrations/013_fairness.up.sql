-- Fair shares across keys (docs/fairness.md). A fair job carries its key
-- and its virtual start time, set at enqueue; a claim takes a queue's ready
-- fair jobs by (priority, fair_start, id) through an index of their own,
-- and the plain and rate-limited streams leave them out. sluice_fair_keys
-- holds each key's last virtual finish, written only by enqueues.
ALTER TABLE sluice_jobs ADD COLUMN fair_key TEXT;
ALTER TABLE sluice_jobs ADD COLUMN fair_start INTEGER;
CREATE TABLE sluice_fair_keys (
  queue TEXT NOT NULL,
  fair_key TEXT NOT NULL,
  finish INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, fair_key)
);
CREATE INDEX sluice_fair_keys_finish ON sluice_fair_keys (queue, finish);
DROP INDEX sluice_jobs_ready_plain;
DROP INDEX sluice_jobs_ready_limited;
CREATE INDEX sluice_jobs_ready_plain ON sluice_jobs (queue, priority, id) WHERE state = 'ready' AND rate_keys IS NULL AND fair_key IS NULL;
CREATE INDEX sluice_jobs_ready_limited ON sluice_jobs (queue, priority, id) WHERE state = 'ready' AND rate_keys IS NOT NULL AND fair_key IS NULL;
CREATE INDEX sluice_jobs_ready_fair ON sluice_jobs (queue, priority, fair_start, id) WHERE state = 'ready' AND fair_key IS NOT NULL;
