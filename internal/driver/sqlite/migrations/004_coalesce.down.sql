DROP TABLE sluice_calls;
DROP INDEX sluice_jobs_coalesce;
ALTER TABLE sluice_jobs DROP COLUMN first_call_at;
ALTER TABLE sluice_jobs DROP COLUMN calls;
ALTER TABLE sluice_jobs DROP COLUMN coalesce_key;
