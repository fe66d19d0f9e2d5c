-- Ready jobs in two indexes: those a rate limit must admit, and the rest.
-- A claim takes the two as separate streams, so a flood of limited jobs
-- at the head of a queue is never walked over to reach the jobs behind it.
CREATE INDEX sluice_jobs_ready_plain ON sluice_jobs (queue, priority, id) WHERE state = 'ready' AND rate_keys IS NULL;
CREATE INDEX sluice_jobs_ready_limited ON sluice_jobs (queue, priority, id) WHERE state = 'ready' AND rate_keys IS NOT NULL;
DROP INDEX sluice_jobs_ready;
