ALTER TABLE sluice_jobs DROP COLUMN deferred_at;
ALTER TABLE sluice_jobs DROP COLUMN deferral_reason;
ALTER TABLE sluice_jobs DROP COLUMN deferrals;
ALTER TABLE sluice_jobs DROP COLUMN metadata;
