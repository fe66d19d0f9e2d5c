-- Fair shares across keys: each key's last virtual finish, per queue and
-- priority (docs/fairness.md). Enqueues write these rows, and an
-- operator's cancel of fair jobs that never ran gives back their turns
-- (RefundFairKeys); a claim reads none.

-- name: InsertFairKeys
-- Rows for the keys (sorted) of a queue's priority level, ignoring those
-- that exist.
INSERT INTO sluice_fair_keys (queue, priority, fair_key) VALUES :rows(text, int, text) ON CONFLICT (queue, priority, fair_key) DO NOTHING;

-- name: LockFairKeys
-- The keys of a queue's priority level, locked in key order. Columns:
-- fair_key, finish.
SELECT fair_key, finish FROM sluice_fair_keys WHERE queue = :queue AND priority = :priority AND fair_key IN (:keys) ORDER BY fair_key {Bytewise} FOR UPDATE;

-- fragment: VirtualTimeOfLevel
-- The virtual time of a queue's priority level: the start of the fair job
-- of that priority it claims next. With none ready: the lower of the
-- lowest start of the level's waiting fair jobs (scheduled, parked or
-- blocked) and the latest finish of its keys — a key's finish counts its
-- waiting jobs, so the latest one alone would start a key that arrives
-- behind all of them —, but no lower than the latest finish of the keys
-- that have no job waiting, among the :keys keys with the latest finishes
-- (a key that ran while an old job waits is not charged for it). 0 for a
-- new level.
COALESCE(
  (SELECT j.fair_start FROM sluice_jobs j WHERE {ReadyFair} AND j.priority = :priority ORDER BY j.fair_start, j.id LIMIT 1),
  (SELECT MAX(v) FROM (
    SELECT (SELECT MIN(w) FROM (
      SELECT {LowestWaitingStart} AS w
      UNION ALL SELECT (SELECT MAX(finish) FROM sluice_fair_keys WHERE queue = :queue AND priority = :priority)) l) AS v
    UNION ALL SELECT (SELECT MAX(k.finish) FROM (
      SELECT fair_key, finish FROM sluice_fair_keys WHERE queue = :queue AND priority = :priority ORDER BY finish DESC LIMIT :keys) k
      WHERE NOT EXISTS (SELECT 1 FROM sluice_jobs j WHERE {WaitingFair} AND j.priority = :priority AND j.fair_key = k.fair_key))) t),
  0)

-- fragment: LowestWaitingStart
-- The lowest start of a queue's priority level's waiting fair jobs
-- (scheduled, parked or blocked), or NULL.
(SELECT j.fair_start FROM sluice_jobs j WHERE {WaitingFair} AND j.priority = :priority ORDER BY j.fair_start LIMIT 1)

-- name: FairVirtualTime
SELECT {VirtualTimeOfLevel};

-- fragment: ServedFinish
-- The finish of the level's (:served + 1)-th latest key, NULL with fewer
-- keys: a key whose finish is before it is never among the :served + 1
-- keys with the latest finishes that the virtual time looks at.
(SELECT finish FROM sluice_fair_keys WHERE queue = :queue AND priority = :priority ORDER BY finish DESC LIMIT 1 OFFSET :served)

-- name: FairPruneBound
-- What PruneFairKeys deletes a level's keys against: its virtual time,
-- the lowest start of its waiting fair jobs (NULL with none) and the
-- finish of the last key the virtual time looks at (ServedFinish), read
-- in one statement, on one snapshot (at READ COMMITTED each statement
-- reads its own), so that a job moving between ready and waiting
-- meanwhile (a promotion, an unpark, a slot handed to a blocked job, a
-- claim's deferral) is counted in one of the two, never in neither.
SELECT {VirtualTimeOfLevel}, {LowestWaitingStart}, {ServedFinish};

-- name: LockFairAnchor
-- The key of a queue's priority level with the latest finish that no
-- other transaction holds, locked without waiting. Columns: fair_key,
-- finish.
SELECT fair_key, finish FROM sluice_fair_keys WHERE queue = :queue AND priority = :priority ORDER BY finish DESC LIMIT 1 FOR UPDATE SKIP LOCKED;

-- name: LockPrunableFairKeys
-- Up to :limit keys of a queue's priority level after :after, in the
-- primary key's order (the prune walks the level a page at a time),
-- whose finish is at most :through, but for :anchor, locked without
-- waiting: a key another transaction holds is being enqueued to, and is
-- skipped. Since it never waits, the order it locks in cannot close a
-- cycle of waits.
SELECT fair_key FROM sluice_fair_keys WHERE queue = :queue AND priority = :priority AND fair_key > :after AND finish <= :through AND fair_key <> :anchor
ORDER BY fair_key LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: ReadPrunableFairKeys
-- The keys :names of a queue's priority level, each with its finish and
-- whether a fair job of the key at that level waits to be ready, beside
-- the columns of FairPruneBound, all in one statement, on one snapshot.
-- Columns: virtual time, lowest waiting start, served finish, fair_key,
-- finish, waiting (0 or 1).
SELECT {VirtualTimeOfLevel}, {LowestWaitingStart}, {ServedFinish}, p.fair_key, p.finish,
  CASE WHEN EXISTS (SELECT 1 FROM sluice_jobs j WHERE {WaitingFair} AND j.priority = :priority AND j.fair_key = p.fair_key) THEN 1 ELSE 0 END
FROM sluice_fair_keys p WHERE p.queue = :queue AND p.priority = :priority AND p.fair_key IN (:names);

-- name: SaveFairKeys
INSERT INTO sluice_fair_keys (queue, priority, fair_key, finish) VALUES :rows(text, int, text, bigint)
ON CONFLICT (queue, priority, fair_key) DO UPDATE SET finish = EXCLUDED.finish;

-- name: FairLevels
-- The priority levels of each queue that have fairness keys. Columns:
-- queue, priority.
SELECT DISTINCT queue, priority FROM sluice_fair_keys;

-- name: DeleteFairKeys
-- The keys :keys of a queue's priority level, which the transaction
-- locked and PruneFairKeys found it may delete.
DELETE FROM sluice_fair_keys WHERE queue = :queue AND priority = :priority AND fair_key IN (:keys);

-- name: RefundFairKeys
-- Gives back the charge of fair jobs cancelled before any claim (an
-- operator's cancel): :ids lists, for each of the keys (sorted) of a
-- queue's priority level, the one such job with the lowest start, C. The
-- key's finish becomes C when it is later and the key has no job of the
-- level ready, waiting (scheduled, parked or blocked) or running that
-- starts at C or after: a key's starts rise in enqueue order, so its
-- jobs before C finish by C. A key with such a job keeps its finish.
-- The jobs are read, not locked (READ COMMITTED on MySQL): the
-- statement locks only the keys' rows.
UPDATE sluice_fair_keys SET finish = (SELECT d.fair_start FROM sluice_jobs d WHERE d.id IN (:ids) AND d.fair_key = sluice_fair_keys.fair_key)
WHERE queue = :queue AND priority = :priority AND fair_key IN (:keys)
AND EXISTS (SELECT 1 FROM sluice_jobs d WHERE d.id IN (:ids) AND d.fair_key = sluice_fair_keys.fair_key AND d.fair_start < sluice_fair_keys.finish
  AND NOT EXISTS (SELECT 1 FROM sluice_jobs j WHERE {ReadyFair} AND j.priority = :priority AND j.fair_start >= d.fair_start AND j.fair_start < sluice_fair_keys.finish AND j.fair_key = d.fair_key)
  AND NOT EXISTS (SELECT 1 FROM sluice_jobs j WHERE {WaitingFair} AND j.priority = :priority AND j.fair_key = d.fair_key AND j.fair_start >= d.fair_start)
  AND NOT EXISTS (SELECT 1 FROM sluice_jobs j WHERE {RunningJob} AND j.queue = :queue AND j.priority = :priority AND j.fair_key = d.fair_key AND j.fair_start >= d.fair_start));
