ALTER TABLE sluice_semaphores ADD COLUMN value INT NOT NULL DEFAULT 0;
UPDATE sluice_semaphores SET value = GREATEST(limit_to - held, 0);
ALTER TABLE sluice_semaphores DROP COLUMN held;
