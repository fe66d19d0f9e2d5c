CREATE INDEX sluice_jobs_ready ON sluice_jobs (queue, priority, id) WHERE state = 'ready';
DROP INDEX sluice_jobs_ready_plain;
DROP INDEX sluice_jobs_ready_limited;
