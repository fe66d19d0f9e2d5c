-- Failed jobs are kept until retried or deleted; counting them per queue
-- (queue depth, metrics) reads only them.
CREATE INDEX sluice_jobs_failed ON sluice_jobs (queue) WHERE state = 'failed';
