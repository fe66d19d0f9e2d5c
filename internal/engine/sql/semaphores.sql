-- Concurrency limits: semaphores, and the jobs blocked on them or holding
-- their slots.

-- name: LockSemaphores
SELECT {SemaphoreColumns} FROM sluice_semaphores WHERE name IN (:keys) ORDER BY name {Bytewise} FOR UPDATE;

-- name: LockFreeSemaphores
-- The semaphores of keys that no other transaction holds, locked without
-- waiting for the others (giveBack inside a claim, after its budgets).
SELECT {SemaphoreColumns} FROM sluice_semaphores WHERE name IN (:keys) ORDER BY name {Bytewise} FOR UPDATE SKIP LOCKED;

-- name: ExistingSemaphores
-- Which of :keys have a committed row, read without locking: of the
-- semaphores a promotion could not lock without waiting (lockDueSlots),
-- those another transaction holds; the others have no row, or one being
-- created by another transaction, which no read sees.
SELECT name FROM sluice_semaphores WHERE name IN (:keys);

-- name: InsertSemaphores
-- Unused semaphores for keys (sorted), in key order, locking those that
-- exist without changing them (the update's WHERE is false; MySQL's
-- spelling is ON DUPLICATE KEY UPDATE name = name). LockSemaphores follows
-- it (lockSlots). The insert locks what it finds because idle rows are
-- deleted (LockIdleSemaphores): a row found here could otherwise be
-- deleted before LockSemaphores locks it, and this transaction would then
-- save the key's slots over those of one that created the row again. A
-- row being deleted makes the insert wait, then insert it anew.
INSERT INTO sluice_semaphores (name) VALUES :rows(text) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name WHERE FALSE;

-- name: SaveSemaphores
INSERT INTO sluice_semaphores ({SemaphoreColumns})
VALUES :rows(text, int, int, bigint, bigint, bigint)
ON CONFLICT (name) DO UPDATE SET held = EXCLUDED.held, limit_to = EXCLUDED.limit_to, duration_us = EXCLUDED.duration_us,
  expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at;

-- name: LockBlocked
-- A key's first blocked jobs, two reads each through its own index: up to
-- :limit of all of them (stream 0) by priority and id, whether each is
-- fair, and up to :limit fair ones (stream 1) by priority, virtual start
-- and id. The store hands each slot to the next job of the first stream,
-- except that a fair one's goes to the fair job of its level (its queue
-- and priority: starts of different levels do not compare) with the
-- lowest start (docs/fairness.md); the others stay blocked, locked until
-- the transaction ends. A paused queue's jobs are passed over: they stay
-- blocked, in their places, until the queue resumes. The fair read is an
-- empty range where no job is fair. (Each locking read sits in a derived
-- table: PostgreSQL refuses one in a branch of a UNION.) Columns: id,
-- queue, priority, fair, fair_start (0 in stream 0), stream.
SELECT id, queue, priority, fair, 0 AS fair_start, 0 AS stream FROM (
  SELECT j.id, j.queue, j.priority, CASE WHEN j.fair_key IS NULL THEN 0 ELSE 1 END AS fair FROM sluice_jobs j
  WHERE {BlockedJob} AND {BlockedKey} = :key AND {JobQueueNotPaused}
  ORDER BY j.priority, j.id LIMIT :limit FOR UPDATE SKIP LOCKED) b
UNION ALL SELECT id, queue, priority, 1, fair_start, 1 FROM (
  SELECT j.id, j.queue, j.priority, j.fair_start FROM sluice_jobs j WHERE {BlockedFairJob} AND {BlockedFairKey} = :key
    AND {JobQueueNotPaused}
  ORDER BY j.priority, j.fair_start, j.id LIMIT :limit FOR UPDATE SKIP LOCKED) f;

-- name: BlockedLimit
-- The limit (To and Duration, in microseconds) that the first blocked job
-- of :key, of a queue not paused, was enqueued under, through the index
-- of blocked jobs: the key's row declares none (fill). Columns:
-- conc_limit, conc_duration.
SELECT j.conc_limit, j.conc_duration FROM sluice_jobs j WHERE {BlockedJob} AND {BlockedKey} = :key AND {JobQueueNotPaused}
ORDER BY j.priority, j.id LIMIT 1;

-- name: MarkSlots
UPDATE sluice_jobs SET holds_slot = :holds WHERE id IN (:ids);

-- name: LockRunningHolders
-- The running jobs of expired keys that hold a slot, with their claim
-- times: those claimed more than the key's Duration ago are presumed
-- lost, and lose it (a ready or scheduled holder is not lost, and keeps
-- its; a running one claimed since is not lost yet). Those another
-- transaction holds (a finish or a release, which lock jobs before
-- semaphores) are skipped, and keep their slots. Columns: id, conc_key,
-- attempted_at.
SELECT id, conc_key, attempted_at FROM sluice_jobs j WHERE j.conc_key IN (:keys) AND j.holds_slot = TRUE AND {RunningJob}
ORDER BY id FOR UPDATE SKIP LOCKED;

-- name: ExpiredSemaphores
-- Keys with taken slots that expired before :now, unlocked: the caller
-- locks them in key order with the others it needs, skipping those
-- another transaction holds (MaintainSemaphores, through lockDueSlots),
-- and checks again.
SELECT name FROM sluice_semaphores WHERE held > 0 AND expires_at < :now
ORDER BY expires_at LIMIT :limit;

-- name: BlockedKeys
-- Keys with blocked jobs of a queue not paused whose semaphore has a free
-- slot, or no row, or no limit declared (which the first blocked job
-- declares: fill). (A paused queue's blocked jobs wait for its resume:
-- their keys would otherwise come back every time, for nothing.)
SELECT DISTINCT {BlockedKey} FROM sluice_jobs j LEFT JOIN sluice_semaphores s ON s.name = {BlockedKey}
WHERE {BlockedJob} AND (s.name IS NULL OR s.held < s.limit_to OR s.limit_to <= 0) AND {JobQueueNotPaused} LIMIT :limit;

-- name: LockIdleSemaphores
-- Up to :limit semaphores after :after, in the primary key's order (the
-- clean-up walks the table a page at a time), with no slot held and no
-- activity (no slot taken or given back, no limit declared) since
-- :before, locked without waiting: a row another transaction holds is in
-- use, and skipped. Since it never waits, the order it locks in (on
-- PostgreSQL the column's collation, maybe not byte order) cannot close a
-- cycle of waits. ClearIdleSemaphores deletes those with no blocked job
-- (BlockedAmong). (MySQL cannot skip locked rows in a DELETE, so they are
-- locked, then deleted.)
SELECT name FROM sluice_semaphores WHERE name > :after AND held = 0 AND updated_at < :before
ORDER BY name LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: ReadUndeclaredSemaphores
-- The names of up to :limit semaphores of one concurrency scope (the bare
-- scope :scope, and the keys from :prefix up to :past: SCOPE/…) after
-- :after, whose limit is not :limit_to and :duration_us, read without
-- locking them: a worker's start declares its limit on them
-- (DeclareSemaphores), which then locks those no other transaction holds
-- (LockFreeSemaphores: in key order, waiting for none) and checks them
-- again. The walk goes in the primary key's order (on PostgreSQL its
-- collation's, maybe not byte order), so that each page starts where the
-- last one ended; the scope is matched byte by byte.
SELECT name FROM sluice_semaphores
WHERE name > :after AND (name = :scope OR (name {Bytewise} >= :prefix AND name {Bytewise} < :past))
  AND (limit_to <> :limit_to OR duration_us <> :duration_us)
ORDER BY name LIMIT :limit;

-- name: BlockedAmong
-- Which of :keys have a blocked job, through the index of blocked jobs.
SELECT DISTINCT {BlockedKey} FROM sluice_jobs j WHERE {BlockedJob} AND {BlockedKey} IN (:keys);

-- name: DeleteSemaphores
DELETE FROM sluice_semaphores WHERE name IN (:names) AND held = 0;

-- name: PageSemaphores
-- Up to :limit semaphores whose names sort after :after, in the primary
-- key's order (keyset pages, as PageBudgets), with their blocked and
-- holding jobs.
SELECT {SemaphoreColumns},
  (SELECT count(*) FROM sluice_jobs j WHERE {BlockedKey} = s.name AND {BlockedJob}),
  (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.holds_slot = TRUE)
FROM sluice_semaphores s WHERE name > :after ORDER BY name LIMIT :limit;

-- name: CountSemaphores
-- The semaphores, counted up to :limit through the primary key.
SELECT count(*) FROM (SELECT 1 FROM sluice_semaphores LIMIT :limit) c;
