-- Queues and rate-limit overrides.

-- name: SetQueuePaused
INSERT INTO sluice_queues (name, paused, updated_at) VALUES (:name, :paused, :now)
ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = EXCLUDED.updated_at;

-- name: ListQueues
-- Queues known from jobs or pauses, and whether each is paused.
SELECT name, MAX(CASE WHEN paused = TRUE THEN 1 ELSE 0 END) = 1 FROM (
  SELECT DISTINCT queue AS name, FALSE AS paused FROM sluice_jobs
  UNION ALL SELECT name, paused FROM sluice_queues) q
GROUP BY name ORDER BY name;

-- name: PausedQueues
-- The queues paused now. A job of one takes no concurrency slot as it is
-- enqueued: it waits, scheduled, for the resume (enqueueTx).
SELECT name FROM sluice_queues WHERE paused = TRUE;

-- name: SaveOverride
INSERT INTO sluice_limit_overrides (target, to_count, per_us, burst, updated_at) VALUES (:target, :to_count, :per_us, :burst, :now)
ON CONFLICT (target) DO UPDATE SET to_count = EXCLUDED.to_count, per_us = EXCLUDED.per_us, burst = EXCLUDED.burst, updated_at = EXCLUDED.updated_at;

-- name: DeleteOverride
DELETE FROM sluice_limit_overrides WHERE target = :target;

-- name: ListOverrides
SELECT target, to_count, per_us, burst, updated_at FROM sluice_limit_overrides ORDER BY target;
