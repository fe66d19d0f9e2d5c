package postgres

import (
	"github.com/sluicequeue/sluice/internal/engine"
)

// What PostgreSQL spells its own way. Everything else is the engine's
// catalog (internal/engine/sql), rendered with arrays: lists travel as
// one array parameter, so every statement has one text and pgx prepares
// it once.

// Capabilities: arrays, booleans, RETURNING and row locks.
func (Dialect) Capabilities() engine.Capabilities {
	return engine.Capabilities{Arrays: true, Booleans: true, Returning: true, RowLocks: true, MaxInsertBatch: 5000}
}

// Replacements are the notifications (unless NoNotify), the advisory
// migration lock (unless NoAdvisoryLock), the switch to generic plans and
// the bounded lock wait of a promotion's new semaphores.
func (d Dialect) Replacements() string {
	s := placeRanges + genericPlans + shortLockWait
	if !d.NoNotify {
		s += notifications
	}
	if !d.NoAdvisoryLock {
		s += advisoryLock
	}
	return s
}

// shortLockWait bounds, to a millisecond, how long a promotion waits
// while it creates the semaphore rows its keys lack (engine's
// lockDueSlots), in a savepoint: a row another transaction is inserting
// (an app's open transaction that enqueued the key's first job) is seen
// by no read, and the insert waits for that transaction's end. A lock
// wait that runs out rolls the savepoint back, with the setting, and the
// promotion leaves those keys' due jobs for a later one. ShortLockWait
// keeps the transaction's own lock_timeout in a setting of its own
// (sluice.lock_timeout, local to the transaction) before it sets the
// millisecond: the subquery is evaluated first, as the outer select
// reads its row. RestoreLockWait sets that value back once the rows are
// made: the value the transaction had, whether the app set it on the
// connection (SET, a pool's AfterConnect), for the transaction (SET
// LOCAL) or in the role's or database's defaults. (SET LOCAL … = DEFAULT
// would set the default of the role, database or server instead, and a
// connection's own value of 5s became 0, no bound, for the rest of the
// transaction.) Both are one statement each, pipelined with the insert.
const shortLockWait = `
-- name: ShortLockWait
SELECT set_config('lock_timeout', '1ms', true)
FROM (SELECT set_config('sluice.lock_timeout', current_setting('lock_timeout'), true) AS saved) s;

-- name: RestoreLockWait
SELECT set_config('lock_timeout', current_setting('sluice.lock_timeout'), true);
`

// genericPlans is sent, ahead of the statements that read its candidates,
// by a claim that goes around a flood a sweep is moving (engine.Span): it
// runs three statements around the flood, on top of the plain stream's,
// and PostgreSQL plans each anew at every claim (its plan cache keeps
// custom plans for them), which cost the unlimited
// jobs claimed meanwhile about a millisecond at the median
// (docs/benchmarks.md, "The flood's planning"). A claim's statements name
// the state of the partial index they read in their text, or list the ids
// they take by primary key (sql/README.md), which a generic plan uses as a
// custom one does; the flood benchmark's burn-down beside a sweep kept its
// pace with it.
const genericPlans = `
-- name: GenericPlans
SET LOCAL plan_cache_mode = force_generic_plan;
`

// placeRanges bounds a job's place in its queue as one row comparison, an
// index condition on (queue, priority, id) that no generic plan trades for
// a walk of the primary key over every older job.
const placeRanges = `
-- fragment: AtPriorityBetween
(j.priority, j.id) > (:priority, :after) AND (j.priority, j.id) < (:priority, :before)
`

// notifications wake listening workers for the queues that gained ready
// jobs, delivered at commit: by enqueues in the same statement, and by
// the store after promotions and hand-offs.
const notifications = `
-- name: Notify
SELECT pg_notify('` + engine.Channel + `', q) FROM unnest(:queues::text[]) q;

-- name: WakeOnInsert
-- Wraps an insert that ends in RETURNING id.
WITH ins AS ({insert}, queue, state),
woke AS (
  SELECT pg_notify('` + engine.Channel + `', queue) FROM (SELECT DISTINCT queue FROM ins WHERE state = 'ready') q)
SELECT id FROM ins WHERE (SELECT count(*) FROM woke) >= 0;
`

// advisoryLock serializes migrators with a transaction-scoped advisory
// lock, which a migration run's transaction takes first and holds until it
// ends, each migration running in a savepoint of it.
const advisoryLock = `
-- name: LockMigrations
SELECT pg_advisory_xact_lock(7251002);

-- name: UnlockMigrations
`

// Now reads clock_timestamp(): the time now, not at the transaction's
// start.
func (Dialect) Now() string {
	return `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`
}

// SetJobs applies transitions from arrays: one text, prepared once.
func (Dialect) SetJobs(from engine.State, processID, now int64, rows []engine.SetRow) (string, []any) {
	n := len(rows)
	ids, runAt, finished := make([]int64, n), make([]int64, n), make([]int64, n)
	states, waitKeys, errs, deferrals := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	deltas, nows, claims := make([]int32, n), make([]int64, n), make([]int64, n)
	for i, r := range rows {
		ids[i], runAt[i], finished[i] = r.ID, r.RunAt, r.FinishedAt
		states[i], waitKeys[i], errs[i], deferrals[i] = string(r.State), r.WaitKey, r.Error, r.Deferral
		deltas[i], nows[i], claims[i] = int32(r.AttemptDelta), now, r.Claim
	}
	return setJobs, []any{ids, states, runAt, waitKeys, errs, deltas, finished, deferrals, nows, claims, string(from), processID}
}

var setJobs = `UPDATE sluice_jobs j SET
  ` + engine.SetJobsAssignments + `
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::int[], $7::bigint[], $8::text[], $9::bigint[], $10::bigint[])
  AS v(` + engine.SetJobsColumns + `)
WHERE j.id = v.id AND ` + engine.SetJobsCondition("$11", "$12::bigint", "$12")
