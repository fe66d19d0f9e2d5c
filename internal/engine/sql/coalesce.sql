-- Coalescing: a pending job that collects the calls made while it waits.

-- name: InsertCoalescing
-- One job that takes a coalesce key, unless a pending job holds it: no id
-- comes back (or no row is affected) on a conflict.
INSERT INTO sluice_jobs (kind, queue, priority, state, args, max_attempts, created_at, run_at, rate_keys,
  conc_key, conc_limit, conc_duration, conc_discard, holds_slot, coalesce_key, first_call_at, metadata, fair_key, fair_start)
VALUES (:kind, :queue, :priority, :state, :args, :max_attempts, :created_at, :run_at, NULLIF(:rate_keys, ''),
  NULLIF(:conc_key, ''), :conc_limit, :conc_duration, :conc_discard, :holds_slot, :coalesce_key, :first_call_at,
  NULLIF(:metadata, ''), NULLIF(:fair_key, ''), :fair_start)
ON CONFLICT (coalesce_key) WHERE coalesce_key IS NOT NULL DO NOTHING
RETURNING id;

-- name: LockPending
SELECT {JobInfoColumns}, first_call_at FROM sluice_jobs WHERE coalesce_key = :key FOR UPDATE;

-- name: LockCoalesceKeys
-- Where a locking read locks index entries apart from rows (IndexLocks:
-- MySQL), a coalescing call takes its key's row here before it looks for
-- the key's pending job, so that no other call creates one meanwhile; the
-- rows (sorted) that do not exist are created, those that do are locked
-- without being changed, in key order. A row being deleted
-- (DeleteCoalesceKeys) makes the insert wait, then insert it anew.
INSERT INTO sluice_coalesce_keys (name) VALUES :rows(text) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name WHERE FALSE;

-- name: FindPending
-- The pending job of a key, read without a lock (at READ COMMITTED, as
-- last committed): LockPendingByID then locks it through the primary
-- key, never through the coalesce index's entry, which a claim that
-- releases the job's key must lock after the job.
SELECT id FROM sluice_jobs WHERE coalesce_key = :key ORDER BY id LIMIT 1;

-- name: LockPendingByID
SELECT {JobInfoColumns}, first_call_at FROM sluice_jobs WHERE id = :id AND coalesce_key = :key FOR UPDATE;

-- name: LockIdleCoalesceKeys
-- Up to :limit key rows after :after, in key order, locked without
-- waiting: a row another transaction holds is in use, and skipped. A row
-- only serves to be locked, so any other may go (DeleteCoalesceKeys): the
-- next call of its key creates it again.
SELECT name FROM sluice_coalesce_keys WHERE name > :after ORDER BY name LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: DeleteCoalesceKeys
DELETE FROM sluice_coalesce_keys WHERE name IN (:names);

-- name: UpdateCoalesced
-- A joining call: new args unless empty, the call count, the state, a new
-- run_at unless 0, and the key given up when the job is full.
UPDATE sluice_jobs SET
  args = CASE WHEN :args = '' THEN args ELSE :args END,
  calls = :calls,
  state = :state,
  run_at = CASE WHEN :run_at::bigint = 0 THEN run_at ELSE :run_at END,
  coalesce_key = CASE WHEN :release = TRUE THEN NULL ELSE coalesce_key END
WHERE id = :id;

-- name: InsertCall
INSERT INTO sluice_calls (job_id, seq, args, created_at) VALUES (:job_id, :seq, :args, :now);

-- name: LoadCalls
SELECT job_id, args FROM sluice_calls WHERE job_id IN (:job_ids) ORDER BY job_id, seq;

-- name: DeleteCalls
DELETE FROM sluice_calls WHERE job_id IN (:job_ids);
