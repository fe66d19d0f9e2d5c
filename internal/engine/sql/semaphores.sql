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

-- name: LockSlotless
-- Of the listed jobs running for :process_id, those that hold no slot,
-- about to be made ready again: the caller keeps those with a concurrency
-- key (their key expired while they ran). :holding is FALSE and :running
-- is 'running', as in CompleteJobs; the key is not tested here, which
-- would lead MySQL to the index of keys instead of the listed ids.
SELECT id, queue, conc_key, conc_limit, conc_duration FROM sluice_jobs
WHERE id IN (:ids) AND holds_slot = :holding AND state = :running AND process_id = :process_id
ORDER BY id FOR UPDATE;

-- name: LockSlotHolders
-- Of the listed jobs, those that hold a slot (and, when :process_id is not
-- 0, run for that process). :holding is TRUE and :running is 'running', as
-- in CompleteJobs.
SELECT id, conc_key FROM sluice_jobs WHERE id IN (:ids) AND holds_slot = :holding
  AND (:process_id::bigint = 0 OR (state = :running AND process_id = :process_id)) ORDER BY id FOR UPDATE;

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
