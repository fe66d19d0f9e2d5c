-- Priority inside a rate limit. A budget remembers the least urgent
-- priority (the largest number) among the jobs it has handed slots to, so a
-- claim looks for a slot to take only when it defers a more urgent job;
-- the index finds a budget's slotted jobs in slot order.
ALTER TABLE sluice_budgets ADD COLUMN slotted_priority integer NOT NULL DEFAULT -2147483648;
CREATE INDEX sluice_jobs_slotted ON sluice_jobs (wait_key, run_at, id) WHERE state = 'scheduled' AND wait_key IS NOT NULL;
