-- How often the job was claimed: each claim (MarkRunning) counts one, and
-- nothing takes one back, unlike the attempt, which a snooze, an upstream
-- 429 or a release gives back. A run's result or release matches the run
-- by it, so that a result written again never matches a later run of the
-- job at the same attempt. Jobs claimed before this migration run at 0,
-- as their runs remember them.
ALTER TABLE sluice_jobs ADD COLUMN claims bigint NOT NULL DEFAULT 0;
