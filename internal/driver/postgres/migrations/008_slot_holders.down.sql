ALTER TABLE sluice_semaphores ADD COLUMN value integer NOT NULL DEFAULT 0;
UPDATE sluice_semaphores SET value = GREATEST(limit_to - held, 0);
DROP INDEX sluice_semaphores_expires;
ALTER TABLE sluice_semaphores DROP COLUMN held;
CREATE INDEX sluice_semaphores_expires ON sluice_semaphores (expires_at) WHERE value < limit_to;
