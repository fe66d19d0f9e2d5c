DROP TABLE sluice_calls;
ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_coalesce,
  DROP COLUMN first_call_at,
  DROP COLUMN calls,
  DROP COLUMN coalesce_key;
