-- Concurrency slots are counted by their holders: held is exactly the
-- number of the key's jobs whose holds_slot is set, so a slot is handed out
-- only while held < limit_to, and a lowered limit drains before any new
-- grant. (The free count it replaces could hand out slots that were never
-- given back.)
ALTER TABLE sluice_semaphores ADD COLUMN held INT NOT NULL DEFAULT 0;
UPDATE sluice_semaphores s SET held = (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.holds_slot = 1);
ALTER TABLE sluice_semaphores DROP COLUMN value;
