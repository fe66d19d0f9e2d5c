-- Fair shares across keys: each key's last virtual finish, per queue
-- (docs/fairness.md). Only enqueues write these rows; a claim reads none.

-- name: InsertFairKeys
-- Rows for a queue's keys (sorted), ignoring those that exist.
INSERT INTO sluice_fair_keys (queue, fair_key) VALUES :rows(text, text) ON CONFLICT (queue, fair_key) DO NOTHING;

-- name: LockFairKeys
-- A queue's keys, locked in key order. Columns: fair_key, finish.
SELECT fair_key, finish FROM sluice_fair_keys WHERE queue = :queue AND fair_key IN (:keys) ORDER BY fair_key {Bytewise} FOR UPDATE;

-- name: FairVirtualTime
-- A queue's virtual time: the start of the fair job it claims next or,
-- with none ready, the latest finish of its keys (0 for a new queue).
SELECT COALESCE(
  (SELECT j.fair_start FROM sluice_jobs j WHERE {ReadyFair} ORDER BY j.priority, j.fair_start, j.id LIMIT 1),
  (SELECT MAX(finish) FROM sluice_fair_keys WHERE queue = :queue),
  0);

-- name: SaveFairKeys
INSERT INTO sluice_fair_keys (queue, fair_key, finish) VALUES :rows(text, text, bigint)
ON CONFLICT (queue, fair_key) DO UPDATE SET finish = EXCLUDED.finish;

-- name: FairQueues
SELECT DISTINCT queue FROM sluice_fair_keys;

-- name: DeleteFairKeys
-- A queue's keys whose last finish is behind its virtual time: a key's
-- next job starts at the virtual time whether its row is there or not.
DELETE FROM sluice_fair_keys WHERE queue = :queue AND finish < :before;
