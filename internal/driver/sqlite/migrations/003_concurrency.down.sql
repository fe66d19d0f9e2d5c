DROP TABLE sluice_semaphores;
DROP INDEX sluice_jobs_holding;
DROP INDEX sluice_jobs_blocked;
ALTER TABLE sluice_jobs DROP COLUMN holds_slot;
ALTER TABLE sluice_jobs DROP COLUMN conc_discard;
ALTER TABLE sluice_jobs DROP COLUMN conc_duration;
ALTER TABLE sluice_jobs DROP COLUMN conc_limit;
ALTER TABLE sluice_jobs DROP COLUMN conc_key;
