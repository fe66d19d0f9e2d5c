-- Priority inside a rate limit. A budget remembers the least urgent
-- priority (the largest number) among the jobs it has handed slots to, so a
-- claim looks for a slot to take only when it defers a more urgent job;
-- the key finds a budget's slotted jobs in slot order (a wait key that
-- holds a value only while the job is scheduled, as in migration 007).
ALTER TABLE sluice_budgets ADD COLUMN slotted_priority INT NOT NULL DEFAULT -2147483648;
ALTER TABLE sluice_jobs
  ADD COLUMN scheduled_key VARCHAR(255) GENERATED ALWAYS AS (IF(state = 'scheduled', wait_key, NULL)) STORED,
  ADD KEY sluice_jobs_slotted (scheduled_key, due_at, id);
