DROP INDEX sluice_jobs_parked_fair;
DROP INDEX sluice_jobs_parked;
CREATE INDEX sluice_jobs_parked ON sluice_jobs (wait_key, priority, id) WHERE state = 'parked';
