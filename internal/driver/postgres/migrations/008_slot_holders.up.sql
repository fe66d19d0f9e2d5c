-- Concurrency slots are counted by their holders: held is exactly the
-- number of the key's jobs whose holds_slot is set, so a slot is handed out
-- only while held < limit_to, and a lowered limit drains before any new
-- grant. (The free count it replaces could hand out slots that were never
-- given back.)
ALTER TABLE sluice_semaphores ADD COLUMN held integer NOT NULL DEFAULT 0;
UPDATE sluice_semaphores s SET held = (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.holds_slot);
DROP INDEX sluice_semaphores_expires;
ALTER TABLE sluice_semaphores DROP COLUMN value;
CREATE INDEX sluice_semaphores_expires ON sluice_semaphores (expires_at) WHERE held > 0;
