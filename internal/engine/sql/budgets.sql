-- Rate-limit budgets and the jobs parked on them.

-- fragment: Bytewise
-- Keys are locked in byte order, the order sluice sorts them in Go to decide
-- which sort after the ones a transaction holds, whatever the database's
-- default collation: PostgreSQL's may be linguistic (en_US.UTF-8 sorts
-- "k_a" before "k/b" and "acme" before "Acme"). MySQL's key columns are
-- utf8mb4_bin and SQLite's BINARY, which need nothing here.
COLLATE "C"

-- name: LockBudgets
SELECT {BudgetColumns} FROM sluice_budgets WHERE name IN (:keys) ORDER BY name {Bytewise} FOR UPDATE;

-- name: LockFreeBudgets
-- The budget rows of keys that no other transaction holds, locked without
-- waiting for the others.
SELECT {BudgetColumns} FROM sluice_budgets WHERE name IN (:keys) ORDER BY name {Bytewise} FOR UPDATE SKIP LOCKED;

-- name: ReadBudgets
-- The budget rows of keys as last committed, without locking them.
SELECT {BudgetColumns} FROM sluice_budgets WHERE name IN (:keys) ORDER BY name;

-- name: GetBudget
SELECT {BudgetColumns} FROM sluice_budgets WHERE name = :key;

-- name: InsertBudgets
-- Empty budgets for keys (sorted), ignoring those that exist.
INSERT INTO sluice_budgets (name) VALUES :rows(text) ON CONFLICT (name) DO NOTHING;

-- name: SaveBudgets
INSERT INTO sluice_budgets ({BudgetColumns})
VALUES :rows(text, bigint, bigint, bigint, int, int, bigint, int)
ON CONFLICT (name) DO UPDATE SET tat_ns = EXCLUDED.tat_ns, next_slot_ns = EXCLUDED.next_slot_ns, interval_ns = EXCLUDED.interval_ns,
  burst = EXCLUDED.burst, parked = EXCLUDED.parked, updated_at = EXCLUDED.updated_at, slotted_priority = EXCLUDED.slotted_priority;

-- name: MoveCursor
-- Moves a budget's slot cursor, counts parked jobs and records the least
-- urgent priority slotted, if the cursor is still where it was read and
-- the budget is still charged under the limit it was read with.
UPDATE sluice_budgets SET next_slot_ns = :to, parked = parked + :parked, slotted_priority = :slotted_priority
WHERE name = :key AND next_slot_ns = :from AND interval_ns = :interval_ns AND burst = :burst;

-- name: LockParkedBudgets
-- Budgets with parked jobs whose next slot falls before :until, soonest
-- first, but those whose parked jobs all wait for their queues to resume:
-- such a budget would come first every time, for nothing, and keep the
-- budgets behind it out of :limit. A budget with a parked job of a queue
-- not paused is taken, and so is one with no parked job at all, whose
-- count ran ahead and is corrected as it is unparked. (Whether a paused
-- budget hands out slots is the store's call.) The reads of jobs lock
-- nothing: they sit in subqueries without a locking clause of their own.
SELECT {BudgetColumns} FROM sluice_budgets b WHERE parked > 0 AND next_slot_ns <= :until
  AND (EXISTS (SELECT 1 FROM sluice_jobs j WHERE {ParkedPlainJob} AND {ParkedPlainKey} = b.name AND {JobQueueNotPaused})
    OR EXISTS (SELECT 1 FROM sluice_jobs j WHERE {ParkedFairJob} AND {ParkedFairKey} = b.name AND {JobQueueNotPaused})
    OR NOT EXISTS (SELECT 1 FROM sluice_jobs j WHERE {ParkedPlainJob} AND {ParkedPlainKey} = b.name)
      AND NOT EXISTS (SELECT 1 FROM sluice_jobs j WHERE {ParkedFairJob} AND {ParkedFairKey} = b.name))
ORDER BY next_slot_ns LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: ReadRepriced
-- The names of the budgets of one scope (the bare scope :target, and the
-- keys from :prefix up to :past: SCOPE/…) or of one key (:target, with
-- :prefix and :past both empty) that sort after :after, that have parked
-- jobs and were last charged under another limit than :interval_ns and
-- :burst, in key order, read without locking them (through the index of
-- parked budgets, parked > 0). Reprice then locks them with LockBudgets,
-- by name in key order as every transaction that waits for budgets does,
-- and checks them again. Locking here would lock them in the order of the
-- index the database reads them through: MariaDB, with a scope of
-- thousands of idle budgets, reads sluice_budgets_parked (parked,
-- next_slot) and sorts after locking, and deadlocked with claims.
SELECT name FROM sluice_budgets
WHERE parked > 0 AND (name = :target OR (name {Bytewise} >= :prefix AND name {Bytewise} < :past))
  AND name {Bytewise} > :after AND (interval_ns <> :interval_ns OR burst <> :burst)
ORDER BY name {Bytewise} LIMIT :limit;

-- name: LockParked
-- A budget's first parked jobs of each stream, each read through its own
-- index: up to :limit without a fairness key (fair 0), by priority and id,
-- and up to :limit fair ones (fair 1), by priority and virtual start. The
-- store merges the two at their heads, as a claim merges its streams, and
-- unparks the first :limit; the others stay parked, locked until the
-- transaction ends. A paused queue's jobs are passed over: they stay
-- parked, counted by the budget (CountParked), until the queue resumes.
-- (Each locking read sits in a derived table: PostgreSQL refuses one in a
-- branch of a UNION.)
SELECT id, rate_keys, priority, fair_start, 0 AS fair FROM (
  SELECT j.id, j.rate_keys, j.priority, j.fair_start FROM sluice_jobs j WHERE {ParkedPlainJob} AND {ParkedPlainKey} = :key
    AND {JobQueueNotPaused}
  ORDER BY j.priority, j.id LIMIT :limit FOR UPDATE SKIP LOCKED) p
UNION ALL SELECT id, rate_keys, priority, fair_start, 1 FROM (
  SELECT j.id, j.rate_keys, j.priority, j.fair_start FROM sluice_jobs j WHERE {ParkedFairJob} AND {ParkedFairKey} = :key
    AND {JobQueueNotPaused}
  ORDER BY j.priority, j.fair_start, j.id LIMIT :limit FOR UPDATE SKIP LOCKED) f;

-- name: LockSlotted
-- A budget's earliest slotted jobs from :from on that are less urgent than
-- :priority and hold no concurrency slot: those whose slot a more urgent
-- job may take.
SELECT id, kind, {DueAt}, priority, rate_keys FROM sluice_jobs j
WHERE {ScheduledJob} AND {ScheduledKey} = :key AND {DueAt} >= :from AND j.priority > :priority AND j.holds_slot = FALSE
ORDER BY {DueAt}, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: CountParked
-- A budget's parked jobs, whether or not another transaction holds them:
-- both streams, a paused queue's too (LockParked passes them over, and
-- the count is what brings the dispatcher back to them after the resume).
SELECT (SELECT count(*) FROM sluice_jobs j WHERE {ParkedPlainJob} AND {ParkedPlainKey} = :key)
  + (SELECT count(*) FROM sluice_jobs j WHERE {ParkedFairJob} AND {ParkedFairKey} = :key);

-- name: UncountParked
-- One parked job fewer on a budget: an operator's cancel or retry took it
-- away, in the transaction that moves it, which holds the job's row
-- (jobs, then semaphores, then budgets, as every transaction locks them).
-- The count may run ahead of the parked jobs, never behind, so it never
-- goes below 0.
UPDATE sluice_budgets SET parked = parked - 1 WHERE name = :key AND parked > 0;

-- name: LockIdleBudgets
-- Budgets whose times have passed and on which no job is parked. (MySQL
-- cannot skip locked rows in a DELETE, so they are locked, then deleted.)
SELECT {BudgetColumns} FROM sluice_budgets WHERE tat_ns <= :now AND next_slot_ns <= :now AND parked = 0
LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: DeleteBudgets
DELETE FROM sluice_budgets WHERE name IN (:names);

-- fragment: BudgetWaiting
-- How many jobs wait on budget b, scheduled for its slots or parked on it,
-- read through the index of jobs by wait key.
(SELECT count(*) FROM sluice_jobs j WHERE j.wait_key = b.name AND j.state IN ('scheduled', 'parked'))

-- name: PageBudgets
-- Up to :limit budgets whose names sort after :after, in the primary key's
-- order (keyset pages: the dashboard and `budgets` read a page at a time),
-- with how many jobs wait on each.
SELECT {BudgetColumns}, {BudgetWaiting} FROM sluice_budgets b WHERE name > :after ORDER BY name LIMIT :limit;

-- name: GetBudgetWaiting
-- One budget, through its primary key, with how many jobs wait on it.
SELECT {BudgetColumns}, {BudgetWaiting} FROM sluice_budgets b WHERE name = :key;

-- name: CountBudgets
-- The budgets, counted up to :limit through the primary key.
SELECT count(*) FROM (SELECT 1 FROM sluice_budgets LIMIT :limit) c;
