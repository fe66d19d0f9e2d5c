-- Fair shares across keys: each key's last virtual finish, per queue and
-- priority (docs/fairness.md). Only enqueues write these rows; a claim
-- reads none.

-- name: InsertFairKeys
-- Rows for the keys (sorted) of a queue's priority level, ignoring those
-- that exist.
INSERT INTO sluice_fair_keys (queue, priority, fair_key) VALUES :rows(text, int, text) ON CONFLICT (queue, priority, fair_key) DO NOTHING;

-- name: LockFairKeys
-- The keys of a queue's priority level, locked in key order. Columns:
-- fair_key, finish.
SELECT fair_key, finish FROM sluice_fair_keys WHERE queue = :queue AND priority = :priority AND fair_key IN (:keys) ORDER BY fair_key {Bytewise} FOR UPDATE;

-- name: FairVirtualTime
-- The virtual time of a queue's priority level: the start of the fair job
-- of that priority it claims next or, with none ready, the latest finish
-- of the level's keys (0 for a new level).
SELECT COALESCE(
  (SELECT j.fair_start FROM sluice_jobs j WHERE {ReadyFair} AND j.priority = :priority ORDER BY j.fair_start, j.id LIMIT 1),
  (SELECT MAX(finish) FROM sluice_fair_keys WHERE queue = :queue AND priority = :priority),
  0);

-- name: SaveFairKeys
INSERT INTO sluice_fair_keys (queue, priority, fair_key, finish) VALUES :rows(text, int, text, bigint)
ON CONFLICT (queue, priority, fair_key) DO UPDATE SET finish = EXCLUDED.finish;

-- name: FairLevels
-- The priority levels of each queue that have fairness keys. Columns:
-- queue, priority.
SELECT DISTINCT queue, priority FROM sluice_fair_keys;

-- name: DeleteFairKeys
-- The keys of a queue's priority level whose last finish is behind its
-- virtual time: a key's next job starts at the virtual time whether its
-- row is there or not.
DELETE FROM sluice_fair_keys WHERE queue = :queue AND priority = :priority AND finish < :before;
