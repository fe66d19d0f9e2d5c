-- Concurrency limits: semaphores, and the jobs blocked on them or holding
-- their slots.

-- name: LockSemaphores
SELECT {SemaphoreColumns} FROM sluice_semaphores WHERE name IN (:keys) ORDER BY name {Bytewise} FOR UPDATE;

-- name: LockFreeSemaphores
-- The semaphores of keys that no other transaction holds, locked without
-- waiting for the others (giveBack inside a claim, after its budgets).
SELECT {SemaphoreColumns} FROM sluice_semaphores WHERE name IN (:keys) ORDER BY name {Bytewise} FOR UPDATE SKIP LOCKED;

-- name: InsertSemaphores
-- Unused semaphores for keys (sorted), ignoring those that exist, in key
-- order: it waits only for a transaction that created or changed one of
-- them and has not committed (on MySQL, whose spelling is ON DUPLICATE KEY
-- UPDATE, it also locks the rows that exist, in the same order).
-- LockSemaphores follows it (lockSlots).
INSERT INTO sluice_semaphores (name) VALUES :rows(text) ON CONFLICT (name) DO NOTHING;

-- name: SaveSemaphores
INSERT INTO sluice_semaphores ({SemaphoreColumns})
VALUES :rows(text, int, int, bigint, bigint, bigint)
ON CONFLICT (name) DO UPDATE SET held = EXCLUDED.held, limit_to = EXCLUDED.limit_to, duration_us = EXCLUDED.duration_us,
  expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at;

-- name: LockBlocked
-- A key's first blocked jobs.
SELECT id, queue FROM sluice_jobs j WHERE {BlockedJob} AND {BlockedKey} = :key
ORDER BY priority, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: MarkSlots
UPDATE sluice_jobs SET holds_slot = :holds WHERE id IN (:ids);

-- name: LockRunningHolders
-- The running jobs of expired keys that hold a slot: they are presumed
-- lost, and lose it (a ready or scheduled holder is not lost, and keeps
-- its). Those another transaction holds (a finish or a release, which
-- lock jobs before semaphores) are skipped, and keep their slots.
SELECT id, conc_key FROM sluice_jobs j WHERE j.conc_key IN (:keys) AND j.holds_slot = TRUE AND {RunningJob}
ORDER BY id FOR UPDATE SKIP LOCKED;

-- name: ExpiredSemaphores
-- Keys with taken slots that expired before :now, unlocked: the caller
-- locks them in key order with the others it needs, and checks again.
SELECT name FROM sluice_semaphores WHERE held > 0 AND expires_at < :now
ORDER BY expires_at LIMIT :limit;

-- name: BlockedKeys
-- Keys with blocked jobs whose semaphore has a free slot or no row.
SELECT DISTINCT {BlockedKey} FROM sluice_jobs j LEFT JOIN sluice_semaphores s ON s.name = {BlockedKey}
WHERE {BlockedJob} AND (s.name IS NULL OR s.held < s.limit_to) LIMIT :limit;

-- name: ListSemaphores
-- Semaphores with their blocked and holding jobs.
SELECT {SemaphoreColumns},
  (SELECT count(*) FROM sluice_jobs j WHERE {BlockedKey} = s.name AND {BlockedJob}),
  (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.holds_slot = TRUE)
FROM sluice_semaphores s ORDER BY name;
