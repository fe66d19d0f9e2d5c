-- Jobs: enqueue, claim, finish, promotion, cleanup, inspection.

-- name: InsertJobs
-- Inserts jobs, one Go slice per column; an empty key, error or metadata,
-- and a zero finish time, are stored as NULL.
INSERT INTO sluice_jobs (kind, queue, priority, state, args, max_attempts, created_at, run_at, rate_keys,
  conc_key, conc_limit, conc_duration, conc_discard, holds_slot, last_error, finished_at, metadata, fair_key, fair_start)
VALUES :rows(text, text, int, text, text, int, bigint, bigint, NULLIF(text, ''),
  NULLIF(text, ''), int, bigint, bool, bool, NULLIF(text, ''), NULLIF(bigint, 0), NULLIF(text, ''), NULLIF(text, ''), bigint)
RETURNING id;

-- name: LockReadyPlain
-- The next ready jobs of an unpaused queue that carry no rate-limit key.
SELECT {JobColumns} FROM sluice_jobs j
WHERE {ReadyPlain}
  AND {QueueNotPaused}
ORDER BY priority, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: LockReadyLimited
-- The next ready jobs of an unpaused queue that carry rate-limit keys.
SELECT {JobColumns} FROM sluice_jobs j
WHERE {ReadyLimited}
  AND {QueueNotPaused}
ORDER BY priority, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: LockReadyLimitedAt
-- The next ready jobs of an unpaused queue that carry rate-limit keys, of
-- one priority and with ids strictly between two: with
-- LockReadyLimitedBefore and LockReadyLimitedAfter, the limited jobs
-- around the run of a flood that a sweep is moving (ClaimParams.Swept).
SELECT {JobColumns} FROM sluice_jobs j
WHERE {ReadyLimited}
  AND {QueueNotPaused} AND {AtPriorityBetween}
ORDER BY priority, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- fragment: AtPriorityBetween
-- Jobs of priority :priority with ids strictly between :after and :before.
j.priority = :priority AND j.id > :after AND j.id < :before

-- name: LockReadyLimitedBefore
-- The next ready jobs of an unpaused queue that carry rate-limit keys and
-- are more urgent than :priority.
SELECT {JobColumns} FROM sluice_jobs j
WHERE {ReadyLimited}
  AND {QueueNotPaused} AND j.priority < :priority
ORDER BY priority, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: LockReadyLimitedAfter
-- The next ready jobs of an unpaused queue that carry rate-limit keys and
-- are less urgent than :priority.
SELECT {JobColumns} FROM sluice_jobs j
WHERE {ReadyLimited}
  AND {QueueNotPaused} AND j.priority > :priority
ORDER BY priority, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: LockReadyFair
-- The next ready fair jobs of an unpaused queue, lowest virtual start
-- first; with limited FALSE, only those that carry no rate-limit key.
SELECT {JobColumns} FROM sluice_jobs j
WHERE {ReadyFair}
  AND (:limited OR j.rate_keys IS NULL)
  AND {QueueNotPaused}
ORDER BY priority, fair_start, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: LockReadyLike
-- Ready jobs of an unpaused queue that draw on exactly the budgets of a
-- parked one and hold no concurrency slot, at any priority: the sweep ends
-- when the first is more urgent than the jobs its budget has slotted
-- (the claims give it the slot of a less urgent one). A sweep that began
-- before its queue was paused finds none, and ends: the paused queue's
-- jobs stay where they are.
SELECT id, priority FROM sluice_jobs j
WHERE {ReadyLimited} AND j.rate_keys = :rate_keys AND j.kind = :kind AND j.holds_slot = FALSE
  AND {QueueNotPaused}
ORDER BY priority, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: FirstReadyLike
-- The first ready job, in claim order, of those LockReadyLike takes, at
-- any priority; none while the queue is paused, so that a sweep of a
-- paused queue ends before it begins. Columns: id, priority.
SELECT id, priority FROM sluice_jobs j
WHERE {ReadyLimited} AND j.rate_keys = :rate_keys AND j.kind = :kind
  AND {QueueNotPaused}
ORDER BY priority, id LIMIT 1;

-- name: LastReadyLike
-- The last ready job, in claim order, of those LockReadyLike takes, at
-- any priority; none while the queue is paused. Columns: id, priority.
SELECT id, priority FROM sluice_jobs j
WHERE {ReadyLimited} AND j.rate_keys = :rate_keys AND j.kind = :kind
  AND {QueueNotPaused}
ORDER BY priority DESC, id DESC LIMIT 1;

-- name: MarkRunning
-- Counts the claim in claims, which nothing takes back (a run is matched
-- by it), and in attempt, which a snooze, a 429 or a release gives back.
UPDATE sluice_jobs SET state = 'running', attempt = attempt + 1, claims = claims + 1, process_id = :process_id, attempted_at = :now, wait_key = NULL,
  coalesce_key = NULL
WHERE id IN (:ids);

-- name: CompleteJobs
-- The listed jobs, of runs made by the claim counted :claim, that still
-- run for the process under that claim: a run presumed lost, or one whose
-- result is written again (the job released, snoozed or turned away by a
-- 429, and perhaps claimed again by the same process, at the same attempt
-- but a later claim) no longer matches. :running is 'running' (see "A
-- list finds its rows by key" in README.md).
UPDATE sluice_jobs SET state = 'completed', finished_at = :now
WHERE id IN (:ids) AND state = :running AND process_id = :process_id AND claims = :claim;

-- name: DeleteJobs
-- The listed jobs that still run for the process under the claim counted
-- :claim, as in CompleteJobs; :running is 'running'.
DELETE FROM sluice_jobs WHERE id IN (:ids) AND state = :running AND process_id = :process_id AND claims = :claim;

-- name: LockDue
-- The due jobs, soonest first, but those of a paused queue that would take
-- a concurrency slot: they stay scheduled until the queue resumes, so that
-- they hold no slot another queue's jobs of their key wait for, and are
-- then promoted as any due job is (a slot, blocked, or discarded).
SELECT id, queue, kind, conc_key, conc_limit, conc_duration, conc_discard, holds_slot, attempted_at, deferrals FROM sluice_jobs j
WHERE {ScheduledJob} AND {DueAt} <= :now
  AND (j.conc_key IS NULL OR j.holds_slot = TRUE OR {JobQueueNotPaused})
ORDER BY {DueAt}, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: LockDueWaiting
-- The due jobs of the queues that wait on a rate limit (a deferral or an
-- upstream 429), soonest first; a paused queue's are left to the
-- dispatcher, which makes them ready where claims skip them.
SELECT {JobColumns}, conc_limit, conc_duration, conc_discard, attempted_at FROM sluice_jobs j
WHERE {ScheduledJob} AND {DueAt} <= :now AND j.wait_key IS NOT NULL AND j.queue IN (:queues)
  AND {JobQueueNotPaused}
ORDER BY {DueAt}, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: LockDueBeyond
-- LockDue but for the jobs that would take a slot of one of :keys, whose
-- semaphores another transaction holds: a promotion that left such jobs
-- due takes the jobs due after them (Store.PromoteDue). Run only then.
SELECT id, queue, kind, conc_key, conc_limit, conc_duration, conc_discard, holds_slot, attempted_at, deferrals FROM sluice_jobs j
WHERE {ScheduledJob} AND {DueAt} <= :now
  AND (j.conc_key IS NULL OR j.holds_slot = TRUE OR {JobQueueNotPaused})
  AND (j.conc_key IS NULL OR j.holds_slot = TRUE OR NOT (j.conc_key IN (:keys)))
ORDER BY {DueAt}, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: LockDueWaitingBeyond
-- LockDueWaiting but for the jobs that would take a slot of one of :keys,
-- whose semaphores another transaction holds: a claim whose promotion left
-- such jobs due takes the jobs due after them. Run only then.
SELECT {JobColumns}, conc_limit, conc_duration, conc_discard, attempted_at FROM sluice_jobs j
WHERE {ScheduledJob} AND {DueAt} <= :now AND j.wait_key IS NOT NULL AND j.queue IN (:queues)
  AND {JobQueueNotPaused}
  AND (j.conc_key IS NULL OR j.holds_slot = TRUE OR NOT (j.conc_key IN (:keys)))
ORDER BY {DueAt}, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: MarkReady
-- :scheduled is 'scheduled', as in CompleteJobs.
UPDATE sluice_jobs SET state = 'ready' WHERE id IN (:ids) AND state = :scheduled;

-- name: LockOrphans
-- Running jobs whose process is listed, or gone and claimed before
-- :lost_before: a process presumed dead that came back may claim before
-- its heartbeat tells it, and runs those jobs.
SELECT id, queue, attempt, max_attempts, conc_key, holds_slot, conc_limit, conc_duration FROM sluice_jobs j
WHERE {RunningJob}
  AND ({RunningProcess} IN (:process_ids)
    OR (j.attempted_at < :lost_before AND NOT EXISTS (SELECT 1 FROM sluice_processes p WHERE p.id = {RunningProcess})))
ORDER BY {RunningProcess}, id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: LockRunningOf
-- The jobs running for one process, with the claim each runs under.
SELECT id, claims FROM sluice_jobs j WHERE {RunningJob} AND {RunningProcess} = :process_id
ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: LockRuns
-- Of the listed jobs, those running for :process_id, with the claim each
-- runs under (the caller keeps the runs its results or its release are
-- for) and what its concurrency slot needs: whether it holds one, its key
-- and limit. :running is 'running', as in CompleteJobs; the key is not
-- tested here, which would lead MySQL to the index of keys instead of the
-- listed ids.
SELECT id, claims, queue, holds_slot, conc_key, conc_limit, conc_duration FROM sluice_jobs
WHERE id IN (:ids) AND state = :running AND process_id = :process_id
ORDER BY id FOR UPDATE;

-- name: Savepoint
-- Marks a transaction (Store.MarkTx): the caller's, before an enqueue of
-- several statements in it, the inserts that find which job the database
-- refused, a schema check, or enqueue middleware's write, so that a
-- failure leaves nothing of them; or a migration run's, before each
-- migration. The store appends _n, the mark's own number, to the name in
-- the three statements, so that marks nest on every database (MySQL
-- replaces a savepoint of the same name instead of nesting it).
SAVEPOINT sluice_mark;

-- name: RollbackToSavepoint
-- Undoes what ran since the savepoint, keeping it.
ROLLBACK TO SAVEPOINT sluice_mark;

-- name: ReleaseSavepoint
-- Forgets the savepoint, keeping what ran since.
RELEASE SAVEPOINT sluice_mark;

-- name: LockFinished
SELECT id, calls FROM sluice_jobs j WHERE {DoneJob} AND {DoneAt} < :before
LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: DeleteJobsByID
DELETE FROM sluice_jobs WHERE id IN (:ids);

-- name: RecordAttempts
-- Keeps the error of the run that just failed, for each of the jobs: its
-- attempt and the error SetJobs stored, in the same transaction. The
-- caller lists only the jobs whose run it moved (locked, and found still
-- running under that run's claim), so that a result written again, or one
-- of a run presumed lost, keeps nothing.
INSERT INTO sluice_attempts (job_id, attempt, error, failed_at)
SELECT id, attempt, last_error, :now FROM sluice_jobs WHERE id IN (:ids) AND last_error IS NOT NULL;

-- name: LoadAttempts
-- A job's failed runs, oldest first.
SELECT attempt, error, failed_at FROM sluice_attempts WHERE job_id = :job_id ORDER BY attempt, failed_at;

-- name: DeleteAttempts
DELETE FROM sluice_attempts WHERE job_id IN (:job_ids);

-- name: GetJob
SELECT {JobInfoColumns} FROM sluice_jobs WHERE id = :id;

-- name: LockJob
SELECT {JobInfoColumns} FROM sluice_jobs WHERE id = :id FOR UPDATE;

-- name: ListJobs
-- Newest first, filtered by whichever of state, kind and queue are set,
-- and below the id before when it is not 0 (the next page).
SELECT {JobInfoColumns} FROM sluice_jobs
WHERE (:state = '' OR state = :state) AND (:kind = '' OR kind = :kind) AND (:queue = '' OR queue = :queue)
AND (:before = 0 OR id < :before)
ORDER BY id DESC LIMIT :limit;

-- name: JobsByState
SELECT queue, state, count(*) FROM sluice_jobs GROUP BY queue, state ORDER BY queue, state;

-- name: UnfinishedByState
-- Each state through its own index, so finished jobs are never read.
-- Ready jobs come in three rows: plain, rate-limited and fair; parked
-- ones in two: plain and fair.
SELECT {ReadyPlainQueue}, 'ready', count(*) FROM sluice_jobs j WHERE {ReadyPlainJob} GROUP BY {ReadyPlainQueue}
UNION ALL SELECT {ReadyLimitedQueue}, 'ready', count(*) FROM sluice_jobs j WHERE {ReadyLimitedJob} GROUP BY {ReadyLimitedQueue}
UNION ALL SELECT {ReadyFairQueue}, 'ready', count(*) FROM sluice_jobs j WHERE {ReadyFairJob} GROUP BY {ReadyFairQueue}
UNION ALL SELECT j.queue, 'scheduled', count(*) FROM sluice_jobs j WHERE {ScheduledJob} GROUP BY j.queue
UNION ALL SELECT j.queue, 'parked', count(*) FROM sluice_jobs j WHERE {ParkedPlainJob} GROUP BY j.queue
UNION ALL SELECT j.queue, 'parked', count(*) FROM sluice_jobs j WHERE {ParkedFairJob} GROUP BY j.queue
UNION ALL SELECT j.queue, 'blocked', count(*) FROM sluice_jobs j WHERE {BlockedJob} GROUP BY j.queue
UNION ALL SELECT j.queue, 'running', count(*) FROM sluice_jobs j WHERE {RunningJob} GROUP BY j.queue
UNION ALL SELECT {FailedQueue}, 'failed', count(*) FROM sluice_jobs j WHERE {FailedJob} GROUP BY {FailedQueue}
ORDER BY 1, 2;

-- name: OldestWaiting
-- Each queue's oldest waiting job, throttled (1: a rate-limit wait or a
-- concurrency block) or not, each kind through its own index, with when
-- it began to wait: a ready job no limit holds waits from its run_at (a
-- job scheduled ahead or retried after a backoff could not run before),
-- one a limit holds from its enqueue. A delayed job (scheduled, no limit
-- holding it) waits from its run_at too, made ready or not: one that came
-- due and that no dispatcher promoted is waiting to run, and one not due
-- yet has a run_at ahead (the caller counts it as 0 s old).
SELECT queue, throttled, MIN(since) FROM (
  SELECT j.queue, {Throttled} AS throttled, {WaitingSince} AS since FROM sluice_jobs j WHERE {ReadyPlainJob}
  UNION ALL SELECT j.queue, {Throttled}, {WaitingSince} FROM sluice_jobs j WHERE {ReadyLimitedJob}
  UNION ALL SELECT j.queue, {Throttled}, {WaitingSince} FROM sluice_jobs j WHERE {ReadyFairJob}
  UNION ALL SELECT j.queue, 1, j.created_at FROM sluice_jobs j WHERE {BlockedJob}
  UNION ALL SELECT j.queue, 1, j.created_at FROM sluice_jobs j WHERE j.wait_key IS NOT NULL AND j.state IN ('scheduled', 'parked')
  UNION ALL {OldestDelayed}
) w GROUP BY queue, throttled;

-- fragment: OldestDelayed
-- Each queue's lowest run_at among its delayed jobs, as queue, 0, run_at:
-- one entry of their index per queue (a loose index scan, which the
-- recursion spells out: each step reads the next queue after the last),
-- however many jobs are scheduled behind it.
SELECT d.queue, 0, (SELECT {DueAt} FROM sluice_jobs j WHERE {DelayedJob} AND {DelayedQueue} = d.queue ORDER BY {DueAt} LIMIT 1) FROM (
  WITH RECURSIVE delayed (queue) AS (
    SELECT (SELECT {DelayedQueue} FROM sluice_jobs j WHERE {DelayedJob} ORDER BY {DelayedQueue} LIMIT 1)
    UNION ALL
    SELECT (SELECT {DelayedQueue} FROM sluice_jobs j WHERE {DelayedJob} AND {DelayedQueue} > p.queue ORDER BY {DelayedQueue} LIMIT 1)
    FROM delayed p WHERE p.queue IS NOT NULL
  ) SELECT queue FROM delayed WHERE queue IS NOT NULL
) d

-- fragment: Throttled
-- 1 for a ready job that came back from a rate-limit wait, else 0.
CASE WHEN j.wait_key IS NOT NULL THEN 1 ELSE 0 END

-- fragment: WaitingSince
-- When a ready job began to wait: its enqueue if a limit held it, else
-- its run_at.
CASE WHEN j.wait_key IS NOT NULL THEN j.created_at ELSE j.run_at END
