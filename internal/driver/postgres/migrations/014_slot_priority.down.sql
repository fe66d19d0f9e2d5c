DROP INDEX sluice_jobs_slotted;
ALTER TABLE sluice_budgets DROP COLUMN slotted_priority;
