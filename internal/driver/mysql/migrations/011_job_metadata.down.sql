ALTER TABLE sluice_jobs
  DROP COLUMN metadata,
  DROP COLUMN deferrals,
  DROP COLUMN deferral_reason,
  DROP COLUMN deferred_at;
