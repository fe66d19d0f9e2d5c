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
-- A coalescing call first takes its key's row, so that no other call
-- creates or joins a pending job of the key until its transaction ends:
-- the rows (sorted) that do not exist are created, those that do are
-- locked without being changed, in key order. A row being deleted
-- (DeleteCoalesceKeys) makes the insert wait, then insert it anew.
-- ReadCoalesceKey follows it, for each key.
INSERT INTO sluice_coalesce_keys (name) VALUES :rows(text) ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name WHERE FALSE;

-- name: ReadCoalesceKey
-- The job a key's row last pointed to (0 for none), read with a lock the
-- transaction already holds, so as committed last whatever the isolation
-- level: the key's pending job, unless it has released the key since
-- (LockPendingByID checks). One key a statement, found through the
-- primary key: MariaDB reads a list of names against a small table by
-- scanning the whole key, which locks (or waits for) the rows of other
-- keys, which their own calls hold. Columns: name, job_id.
SELECT name, COALESCE(job_id, 0) FROM sluice_coalesce_keys WHERE name = :name FOR UPDATE;

-- name: LockPendingByID
-- The job a key's row points to, locked through the primary key, if it
-- still holds the key: never through the coalesce index, whose entry a
-- claim or a cancel holding the job locks to release the key (InnoDB locks
-- index entries apart from rows).
SELECT {JobInfoColumns}, first_call_at FROM sluice_jobs WHERE id = :id AND coalesce_key = :key FOR UPDATE;

-- name: PointCoalesceKeys
-- Each key's row to the pending job a call created for it.
INSERT INTO sluice_coalesce_keys (name, job_id) VALUES :rows(text, bigint)
ON CONFLICT (name) DO UPDATE SET job_id = EXCLUDED.job_id;

-- name: LockIdleCoalesceKeys
-- Up to :limit key rows after :after, in key order, locked without
-- waiting: a row another transaction holds is in use, and skipped.
-- ReleasedCoalesceKeys then tells which of them point to a job that no
-- longer holds the key, and DeleteCoalesceKeys deletes those.
SELECT name FROM sluice_coalesce_keys WHERE name > :after ORDER BY name LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: ReleasedCoalesceKeys
-- Which of the key rows :names (locked) point to no job that still holds
-- the key, read without a lock (MySQL locks the rows a DELETE's subquery
-- reads, so the clean-up would wait for a job a completion holds): a job
-- that released its key never takes it again, so what this read finds
-- released stays released, and the pointer cannot change while the row is
-- locked. Columns: name.
SELECT k.name FROM sluice_coalesce_keys k WHERE k.name IN (:names)
  AND NOT EXISTS (SELECT 1 FROM sluice_jobs j WHERE j.id = k.job_id AND j.coalesce_key = k.name);

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
