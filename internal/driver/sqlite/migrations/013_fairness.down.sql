DROP INDEX sluice_jobs_ready_fair;
DROP INDEX sluice_jobs_ready_plain;
DROP INDEX sluice_jobs_ready_limited;
CREATE INDEX sluice_jobs_ready_plain ON sluice_jobs (queue, priority, id) WHERE state = 'ready' AND rate_keys IS NULL;
CREATE INDEX sluice_jobs_ready_limited ON sluice_jobs (queue, priority, id) WHERE state = 'ready' AND rate_keys IS NOT NULL;
DROP TABLE sluice_fair_keys;
ALTER TABLE sluice_jobs DROP COLUMN fair_key;
ALTER TABLE sluice_jobs DROP COLUMN fair_start;
