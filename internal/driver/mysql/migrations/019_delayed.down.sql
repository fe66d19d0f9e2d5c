ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_delayed,
  DROP COLUMN delayed_queue;
