ALTER TABLE sluice_jobs
  DROP KEY sluice_jobs_slotted,
  DROP COLUMN scheduled_key;
ALTER TABLE sluice_budgets DROP COLUMN slotted_priority;
