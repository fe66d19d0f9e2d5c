ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_blocked_fair,
  DROP KEY sluice_jobs_waiting_fair_key,
  DROP KEY sluice_jobs_waiting_fair,
  DROP COLUMN blocked_fair,
  DROP COLUMN waiting_fair;
