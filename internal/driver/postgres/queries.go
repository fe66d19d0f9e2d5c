package postgres

import (
	"github.com/sluicequeue/sluice/internal/engine"
)

// All of PostgreSQL's SQL. Lists travel as arrays, so every statement has
// one text and pgx prepares it once.

// CreateMigrationsTable creates sluice_migrations.
func (Dialect) CreateMigrationsTable() string {
	return `CREATE TABLE IF NOT EXISTS sluice_migrations (
  version integer PRIMARY KEY,
  name text NOT NULL,
  applied_at bigint NOT NULL)`
}

// LockMigrations takes a transaction-scoped advisory lock.
func (Dialect) LockMigrations() string {
	return `SELECT pg_advisory_xact_lock(7251002)`
}

// UnlockMigrations is empty: the lock ends with the transaction.
func (Dialect) UnlockMigrations() string { return "" }

// AppliedMigrations lists applied versions.
func (Dialect) AppliedMigrations() string {
	return `SELECT version::bigint FROM sluice_migrations ORDER BY version`
}

// RecordMigration marks a version applied.
func (Dialect) RecordMigration(version int, name string, now int64) (string, []any) {
	return `INSERT INTO sluice_migrations (version, name, applied_at) VALUES ($1, $2, $3)`, []any{version, name, now}
}

// ForgetMigration marks a version reverted.
func (Dialect) ForgetMigration(version int) (string, []any) {
	return `DELETE FROM sluice_migrations WHERE version = $1`, []any{version}
}

// InsertJobs inserts jobs from arrays, wakes listeners for the queues that
// gained ready jobs (delivered at commit), and returns the ids.
func (Dialect) InsertJobs(jobs []engine.InsertRow) (string, []any) {
	n := len(jobs)
	kinds, queues, states, args, rateKeys, concKeys, lastErrs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	metadata := make([]string, n)
	prios, maxAttempts, concLimits := make([]int32, n), make([]int32, n), make([]int32, n)
	created, runAt, concDur, finished := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	discard, holds := make([]bool, n), make([]bool, n)
	for i, j := range jobs {
		kinds[i], queues[i], states[i], args[i], rateKeys[i], concKeys[i], lastErrs[i] = j.Kind, j.Queue, string(j.State), j.Args, j.RateKeys, j.ConcKey, j.LastError
		prios[i], maxAttempts[i], concLimits[i] = int32(j.Priority), int32(j.MaxAttempts), int32(j.ConcLimit)
		created[i], runAt[i], concDur[i], finished[i] = j.CreatedAt, j.RunAt, j.ConcDuration, j.FinishedAt
		discard[i], holds[i] = j.ConcDiscard, j.HoldsSlot
		metadata[i] = j.Metadata
	}
	return `WITH ins AS (
  INSERT INTO sluice_jobs (kind, queue, priority, state, args, max_attempts, created_at, run_at, rate_keys,
    conc_key, conc_limit, conc_duration, conc_discard, holds_slot, last_error, finished_at, metadata)
  SELECT k, q, p, s, a, m, c, r, NULLIF(rk, ''), NULLIF(ck, ''), cl, cd, cx, h, NULLIF(le, ''), NULLIF(f, 0), NULLIF(md, '')
  FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::int[], $7::bigint[], $8::bigint[], $9::text[],
    $10::text[], $11::int[], $12::bigint[], $13::bool[], $14::bool[], $15::text[], $16::bigint[], $17::text[])
    AS u(k, q, p, s, a, m, c, r, rk, ck, cl, cd, cx, h, le, f, md)
  RETURNING id, queue, state),
woke AS (
  SELECT pg_notify('` + Channel + `', queue) FROM (SELECT DISTINCT queue FROM ins WHERE state = 'ready') q)
SELECT id FROM ins WHERE (SELECT count(*) FROM woke) >= 0`,
		[]any{kinds, queues, prios, states, args, maxAttempts, created, runAt, rateKeys, concKeys, concLimits, concDur, discard, holds, lastErrs, finished, metadata}
}

// Now reads clock_timestamp(): the time now, not at the transaction's
// start.
func (Dialect) Now() string {
	return `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`
}

// LockReady locks the next ready jobs of an unpaused queue, without or
// with rate limits.
func (Dialect) LockReady(queue string, limited bool, limit int) (string, []any) {
	if limited {
		return `SELECT ` + engine.JobColumns + ` FROM sluice_jobs
WHERE state = 'ready' AND rate_keys IS NOT NULL AND queue = $1
  AND NOT EXISTS (SELECT 1 FROM sluice_queues WHERE name = $1 AND paused)
ORDER BY priority, id LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{queue, limit}
	}
	return `SELECT ` + engine.JobColumns + ` FROM sluice_jobs
WHERE state = 'ready' AND rate_keys IS NULL AND queue = $1
  AND NOT EXISTS (SELECT 1 FROM sluice_queues WHERE name = $1 AND paused)
ORDER BY priority, id LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{queue, limit}
}

// LockReadyLike locks ready jobs that draw on exactly the same budgets as
// a parked one and hold no concurrency slot.
func (Dialect) LockReadyLike(queue, kind, rateKeys string, limit int) (string, []any) {
	return `SELECT id FROM sluice_jobs
WHERE state = 'ready' AND rate_keys IS NOT NULL AND queue = $1 AND rate_keys = $2 AND kind = $3 AND NOT holds_slot
ORDER BY priority, id LIMIT $4 FOR UPDATE SKIP LOCKED`, []any{queue, rateKeys, kind, limit}
}

// MarkRunning claims jobs for a process.
func (Dialect) MarkRunning(ids []int64, processID, now int64) (string, []any) {
	return `UPDATE sluice_jobs SET state = 'running', attempt = attempt + 1, process_id = $1, attempted_at = $2, wait_key = NULL,
  coalesce_key = NULL
WHERE id = ANY($3)`, []any{processID, now, ids}
}

// CompleteJobs marks a process's running jobs completed.
func (Dialect) CompleteJobs(ids []int64, processID, now int64) (string, []any) {
	return `UPDATE sluice_jobs SET state = 'completed', finished_at = $1
WHERE id = ANY($2) AND state = 'running' AND process_id = $3`, []any{now, ids, processID}
}

// DeleteJobs deletes a process's running jobs.
func (Dialect) DeleteJobs(ids []int64, processID int64) (string, []any) {
	return `DELETE FROM sluice_jobs WHERE id = ANY($1) AND state = 'running' AND process_id = $2`, []any{ids, processID}
}

// SetJobs applies transitions from arrays.
func (Dialect) SetJobs(from engine.State, processID, now int64, rows []engine.SetRow) (string, []any) {
	n := len(rows)
	ids, runAt, finished := make([]int64, n), make([]int64, n), make([]int64, n)
	states, waitKeys, errs, deferrals := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	deltas := make([]int32, n)
	for i, r := range rows {
		ids[i], runAt[i], finished[i] = r.ID, r.RunAt, r.FinishedAt
		states[i], waitKeys[i], errs[i] = string(r.State), r.WaitKey, r.Error
		deltas[i], deferrals[i] = int32(r.AttemptDelta), r.Deferral
	}
	return `UPDATE sluice_jobs j SET
  state = v.state,
  run_at = CASE WHEN v.run_at = 0 THEN j.run_at ELSE v.run_at END,
  wait_key = NULLIF(v.wait_key, ''),
  last_error = COALESCE(NULLIF(v.last_error, ''), j.last_error),
  attempt = j.attempt + v.attempt_delta,
  finished_at = NULLIF(v.finished_at, 0),
  coalesce_key = CASE WHEN v.state IN ('completed', 'failed', 'cancelled') THEN NULL ELSE j.coalesce_key END,
  deferrals = j.deferrals + CASE WHEN v.deferral = '' THEN 0 ELSE 1 END,
  deferral_reason = COALESCE(NULLIF(v.deferral, ''), j.deferral_reason),
  deferred_at = CASE WHEN v.deferral = '' OR j.deferred_at > COALESCE(j.attempted_at, 0) THEN j.deferred_at ELSE $10 END
FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::int[], $7::bigint[], $11::text[])
  AS v(id, state, run_at, wait_key, last_error, attempt_delta, finished_at, deferral)
WHERE j.id = v.id AND j.state = $8 AND ($9::bigint = 0 OR j.process_id = $9)`,
		[]any{ids, states, runAt, waitKeys, errs, deltas, finished, string(from), processID, now, deferrals}
}

// LockDue locks scheduled jobs that are due.
func (Dialect) LockDue(now int64, limit int) (string, []any) {
	return `SELECT id, queue, conc_key, conc_limit, conc_duration, conc_discard, holds_slot FROM sluice_jobs
WHERE state = 'scheduled' AND run_at <= $1
ORDER BY run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{now, limit}
}

// LockDueWaiting locks the due jobs of the queues that wait on a rate
// limit.
func (Dialect) LockDueWaiting(queues []string, now int64, limit int) (string, []any) {
	return `SELECT ` + engine.JobColumns + `, conc_limit, conc_duration, conc_discard FROM sluice_jobs
WHERE state = 'scheduled' AND run_at <= $1 AND wait_key IS NOT NULL AND queue = ANY($2)
ORDER BY run_at, id LIMIT $3 FOR UPDATE SKIP LOCKED`, []any{now, queues, limit}
}

// MarkReady makes scheduled jobs ready.
func (Dialect) MarkReady(ids []int64) (string, []any) {
	return `UPDATE sluice_jobs SET state = 'ready' WHERE id = ANY($1) AND state = 'scheduled'`, []any{ids}
}

// Notify wakes listeners for queues, at commit.
func (Dialect) Notify(queues []string) (string, []any) {
	return `SELECT pg_notify('` + Channel + `', q) FROM unnest($1::text[]) q`, []any{queues}
}

// InsertProcess registers a process.
func (Dialect) InsertProcess(p engine.ProcessRow) (string, []any) {
	return `INSERT INTO sluice_processes (kind, name, hostname, pid, queues, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`, []any{p.Kind, p.Name, p.Hostname, p.PID, p.Queues, p.StartedAt, p.HeartbeatAt}
}

// Heartbeat stamps a process.
func (Dialect) Heartbeat(id, now int64) (string, []any) {
	return `UPDATE sluice_processes SET heartbeat_at = $1 WHERE id = $2`, []any{now, id}
}

// DeleteProcess removes a process.
func (Dialect) DeleteProcess(id int64) (string, []any) {
	return `DELETE FROM sluice_processes WHERE id = $1`, []any{id}
}

// LockDeadProcesses locks processes with a stale heartbeat.
func (Dialect) LockDeadProcesses(before int64, limit int) (string, []any) {
	return `SELECT id FROM sluice_processes WHERE heartbeat_at < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{before, limit}
}

// LockOrphans locks running jobs of listed or vanished processes.
func (Dialect) LockOrphans(processIDs []int64, limit int) (string, []any) {
	if processIDs == nil {
		processIDs = []int64{}
	}
	return `SELECT id, queue, attempt, max_attempts, conc_key, holds_slot FROM sluice_jobs j WHERE state = 'running'
  AND (process_id = ANY($1) OR NOT EXISTS (SELECT 1 FROM sluice_processes p WHERE p.id = j.process_id))
ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{processIDs, limit}
}

// DeleteProcesses removes processes.
func (Dialect) DeleteProcesses(ids []int64) (string, []any) {
	return `DELETE FROM sluice_processes WHERE id = ANY($1)`, []any{ids}
}

// ListProcesses lists processes.
func (Dialect) ListProcesses() string {
	return `SELECT ` + engine.ProcessColumns + ` FROM sluice_processes ORDER BY id`
}

// SetQueuePaused pauses or resumes a queue.
func (Dialect) SetQueuePaused(queue string, paused bool, now int64) (string, []any) {
	return `INSERT INTO sluice_queues (name, paused, updated_at) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = EXCLUDED.updated_at`, []any{queue, paused, now}
}

// ListQueues lists queues with jobs or pauses.
func (Dialect) ListQueues() string {
	return `SELECT name, bool_or(paused) FROM (
  SELECT DISTINCT queue AS name, false AS paused FROM sluice_jobs
  UNION ALL SELECT name, paused FROM sluice_queues) q
GROUP BY name ORDER BY name`
}

// LockBudgets locks budgets in key order.
func (Dialect) LockBudgets(keys []string) (string, []any) {
	return `SELECT ` + engine.BudgetColumns + ` FROM sluice_budgets WHERE name = ANY($1) ORDER BY name FOR UPDATE`, []any{keys}
}

// InsertBudgets creates missing budgets.
func (Dialect) InsertBudgets(keys []string) (string, []any) {
	return `INSERT INTO sluice_budgets (name) SELECT k FROM unnest($1::text[]) k ORDER BY k ON CONFLICT (name) DO NOTHING`, []any{keys}
}

// SaveBudgets writes budgets back.
func (Dialect) SaveBudgets(rows []engine.BudgetRow) (string, []any) {
	n := len(rows)
	names := make([]string, n)
	tat, next, interval, updated := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	burst, parked := make([]int32, n), make([]int32, n)
	for i, r := range rows {
		names[i], tat[i], next[i], interval[i], updated[i] = r.Name, r.TAT, r.NextSlot, r.IntervalNS, r.UpdatedAt
		burst[i], parked[i] = int32(r.Burst), int32(r.Parked)
	}
	return `INSERT INTO sluice_budgets (` + engine.BudgetColumns + `)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::int[], $6::int[], $7::bigint[])
ON CONFLICT (name) DO UPDATE SET tat_ns = EXCLUDED.tat_ns, next_slot_ns = EXCLUDED.next_slot_ns, interval_ns = EXCLUDED.interval_ns,
  burst = EXCLUDED.burst, parked = EXCLUDED.parked, updated_at = EXCLUDED.updated_at`,
		[]any{names, tat, next, interval, burst, parked, updated}
}

// LockParkedBudgets locks budgets whose parked jobs may get slots.
func (Dialect) LockParkedBudgets(until int64, limit int) (string, []any) {
	return `SELECT ` + engine.BudgetColumns + ` FROM sluice_budgets WHERE parked > 0 AND next_slot_ns <= $1
ORDER BY next_slot_ns LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{until, limit}
}

// LockParked locks a budget's first parked jobs.
func (Dialect) LockParked(key string, limit int) (string, []any) {
	return `SELECT id, rate_keys FROM sluice_jobs WHERE state = 'parked' AND wait_key = $1
ORDER BY priority, id LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{key, limit}
}

// CountParked counts a budget's parked jobs, locked or not.
func (Dialect) CountParked(key string) (string, []any) {
	return `SELECT count(*) FROM sluice_jobs WHERE state = 'parked' AND wait_key = $1`, []any{key}
}

// LockIdleBudgets locks idle budgets no claim holds.
func (Dialect) LockIdleBudgets(now int64, limit int) (string, []any) {
	return `SELECT ` + engine.BudgetColumns + ` FROM sluice_budgets WHERE tat_ns <= $1 AND next_slot_ns <= $1 AND parked = 0
LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{now, limit}
}

// DeleteBudgets deletes budgets by name.
func (Dialect) DeleteBudgets(names []string) (string, []any) {
	return `DELETE FROM sluice_budgets WHERE name = ANY($1)`, []any{names}
}

// ListBudgets lists budgets with their waiting jobs.
func (Dialect) ListBudgets() string {
	return `SELECT ` + engine.BudgetColumns + `,
  (SELECT count(*) FROM sluice_jobs j WHERE j.wait_key = b.name AND j.state IN ('scheduled', 'parked'))
FROM sluice_budgets b ORDER BY name`
}

// JobsByState counts jobs per queue and state.
func (Dialect) JobsByState() string {
	return `SELECT queue, state, count(*) FROM sluice_jobs GROUP BY queue, state ORDER BY queue, state`
}

// ListJobs lists jobs, newest first.
func (Dialect) ListJobs(f engine.JobFilter) (string, []any) {
	return `SELECT ` + engine.JobInfoColumns + ` FROM sluice_jobs
WHERE ($1 = '' OR state = $1) AND ($2 = '' OR kind = $2) AND ($3 = '' OR queue = $3)
ORDER BY id DESC LIMIT $4`, []any{string(f.State), f.Kind, f.Queue, f.Limit}
}

// GetJob reads one job.
func (Dialect) GetJob(id int64) (string, []any) {
	return `SELECT ` + engine.JobInfoColumns + ` FROM sluice_jobs WHERE id = $1`, []any{id}
}

// LockFinished locks old completed and cancelled jobs.
func (Dialect) LockFinished(before int64, limit int) (string, []any) {
	return `SELECT id, calls FROM sluice_jobs WHERE state IN ('completed', 'cancelled') AND finished_at < $1
LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{before, limit}
}

// DeleteJobsByID deletes jobs.
func (Dialect) DeleteJobsByID(ids []int64) (string, []any) {
	return `DELETE FROM sluice_jobs WHERE id = ANY($1)`, []any{ids}
}

// LockSemaphores locks semaphores in key order.
func (Dialect) LockSemaphores(keys []string) (string, []any) {
	return `SELECT ` + engine.SemaphoreColumns + ` FROM sluice_semaphores WHERE name = ANY($1) ORDER BY name FOR UPDATE`, []any{keys}
}

// InsertSemaphores creates missing semaphores.
func (Dialect) InsertSemaphores(keys []string) (string, []any) {
	return `INSERT INTO sluice_semaphores (name) SELECT k FROM unnest($1::text[]) k ORDER BY k ON CONFLICT (name) DO NOTHING`, []any{keys}
}

// SaveSemaphores writes semaphores back.
func (Dialect) SaveSemaphores(rows []engine.SemaphoreRow) (string, []any) {
	n := len(rows)
	names := make([]string, n)
	held, limit := make([]int32, n), make([]int32, n)
	dur, exp, upd := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, r := range rows {
		names[i], held[i], limit[i], dur[i], exp[i], upd[i] = r.Name, int32(r.Held), int32(r.Limit), r.DurationUS, r.ExpiresAt, r.UpdatedAt
	}
	return `INSERT INTO sluice_semaphores (` + engine.SemaphoreColumns + `)
SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[])
ON CONFLICT (name) DO UPDATE SET held = EXCLUDED.held, limit_to = EXCLUDED.limit_to, duration_us = EXCLUDED.duration_us,
  expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at`, []any{names, held, limit, dur, exp, upd}
}

// LockBlocked locks a key's first blocked jobs.
func (Dialect) LockBlocked(key string, limit int) (string, []any) {
	return `SELECT id, queue FROM sluice_jobs WHERE state = 'blocked' AND conc_key = $1
ORDER BY priority, id LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{key, limit}
}

// MarkSlots records whether jobs hold a slot.
func (Dialect) MarkSlots(ids []int64, holds bool) (string, []any) {
	return `UPDATE sluice_jobs SET holds_slot = $1 WHERE id = ANY($2)`, []any{holds, ids}
}

// LockSlotHolders locks the listed jobs that hold a slot.
func (Dialect) LockSlotHolders(ids []int64, processID int64) (string, []any) {
	return `SELECT id, conc_key FROM sluice_jobs WHERE id = ANY($1) AND holds_slot
  AND ($2::bigint = 0 OR (state = 'running' AND process_id = $2)) ORDER BY id FOR UPDATE`, []any{ids, processID}
}

// LockExpiredSemaphores locks semaphores whose taken slots expired.
func (Dialect) LockExpiredSemaphores(now int64, limit int) (string, []any) {
	return `SELECT ` + engine.SemaphoreColumns + ` FROM sluice_semaphores WHERE held > 0 AND expires_at < $1
ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{now, limit}
}

// BlockedKeys finds keys with blocked jobs and a free slot.
func (Dialect) BlockedKeys(limit int) (string, []any) {
	return `SELECT DISTINCT j.conc_key FROM sluice_jobs j LEFT JOIN sluice_semaphores s ON s.name = j.conc_key
WHERE j.state = 'blocked' AND (s.name IS NULL OR s.held < s.limit_to) LIMIT $1`, []any{limit}
}

// ListSemaphores lists semaphores with their jobs.
func (Dialect) ListSemaphores() string {
	return `SELECT ` + engine.SemaphoreColumns + `,
  (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.state = 'blocked'),
  (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.holds_slot)
FROM sluice_semaphores s ORDER BY name`
}

// LockJob reads and locks one job.
func (Dialect) LockJob(id int64) (string, []any) {
	return `SELECT ` + engine.JobInfoColumns + ` FROM sluice_jobs WHERE id = $1 FOR UPDATE`, []any{id}
}

// InsertCoalescing inserts a job unless a pending job holds its coalesce
// key, and wakes listeners if it is ready.
func (Dialect) InsertCoalescing(j engine.InsertRow) (string, []any) {
	return `WITH ins AS (
  INSERT INTO sluice_jobs (kind, queue, priority, state, args, max_attempts, created_at, run_at, rate_keys,
    conc_key, conc_limit, conc_duration, conc_discard, holds_slot, coalesce_key, first_call_at, metadata)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULLIF($9, ''), NULLIF($10, ''), $11, $12, $13, $14, $15, $16, NULLIF($17, ''))
  ON CONFLICT (coalesce_key) WHERE coalesce_key IS NOT NULL DO NOTHING
  RETURNING id, queue, state),
woke AS (SELECT pg_notify('` + Channel + `', queue) FROM ins WHERE state = 'ready')
SELECT id FROM ins WHERE (SELECT count(*) FROM woke) >= 0`,
		[]any{j.Kind, j.Queue, j.Priority, string(j.State), j.Args, j.MaxAttempts, j.CreatedAt, j.RunAt, j.RateKeys,
			j.ConcKey, j.ConcLimit, j.ConcDuration, j.ConcDiscard, j.HoldsSlot, j.CoalesceKey, j.FirstCallAt, j.Metadata}
}

// LockPending locks the pending job that holds a coalesce key.
func (Dialect) LockPending(key string) (string, []any) {
	return `SELECT ` + engine.JobInfoColumns + `, first_call_at FROM sluice_jobs WHERE coalesce_key = $1 FOR UPDATE`, []any{key}
}

// UpdateCoalesced applies a joining call to the pending job.
func (Dialect) UpdateCoalesced(u engine.CoalesceUpdate) (string, []any) {
	return `UPDATE sluice_jobs SET
  args = CASE WHEN $2 = '' THEN args ELSE $2 END,
  calls = $3,
  state = $4,
  run_at = CASE WHEN $5::bigint = 0 THEN run_at ELSE $5 END,
  coalesce_key = CASE WHEN $6 THEN NULL ELSE coalesce_key END
WHERE id = $1`, []any{u.ID, u.Args, u.Calls, string(u.State), u.RunAt, u.ReleaseKey}
}

// InsertCall stores one collected call.
func (Dialect) InsertCall(jobID int64, seq int, args string, now int64) (string, []any) {
	return `INSERT INTO sluice_calls (job_id, seq, args, created_at) VALUES ($1, $2, $3, $4)`, []any{jobID, seq, args, now}
}

// LoadCalls reads collected calls.
func (Dialect) LoadCalls(jobIDs []int64) (string, []any) {
	return `SELECT job_id, args FROM sluice_calls WHERE job_id = ANY($1) ORDER BY job_id, seq`, []any{jobIDs}
}

// DeleteCalls deletes collected calls.
func (Dialect) DeleteCalls(jobIDs []int64) (string, []any) {
	return `DELETE FROM sluice_calls WHERE job_id = ANY($1)`, []any{jobIDs}
}

// InsertTick records a recurring task's tick unless it is recorded.
func (Dialect) InsertTick(task string, runAt, now int64) (string, []any) {
	return `INSERT INTO sluice_recurring_runs (task, run_at, ran_at) VALUES ($1, $2, $3) ON CONFLICT (task, run_at) DO NOTHING`, []any{task, runAt, now}
}

// SetTickJob records the job a tick enqueued.
func (Dialect) SetTickJob(task string, runAt, jobID int64) (string, []any) {
	return `UPDATE sluice_recurring_runs SET job_id = $1 WHERE task = $2 AND run_at = $3`, []any{jobID, task, runAt}
}

// LastTicks lists each task's latest tick.
func (Dialect) LastTicks() string {
	return `SELECT r.task, r.run_at, r.ran_at, r.job_id FROM sluice_recurring_runs r
JOIN (SELECT task, MAX(run_at) AS run_at FROM sluice_recurring_runs GROUP BY task) l ON l.task = r.task AND l.run_at = r.run_at
ORDER BY r.task`
}

// DeleteTicks deletes old tick records.
func (Dialect) DeleteTicks(before int64) (string, []any) {
	return `DELETE FROM sluice_recurring_runs WHERE run_at < $1`, []any{before}
}

// UnfinishedByState counts unfinished jobs per queue and state, each state
// through its partial index, so finished jobs are never read (ready jobs
// from their two indexes alone).
func (Dialect) UnfinishedByState() string {
	return `SELECT queue, 'ready', count(*) FROM sluice_jobs WHERE state = 'ready' AND rate_keys IS NULL GROUP BY queue
UNION ALL SELECT queue, 'ready', count(*) FROM sluice_jobs WHERE state = 'ready' AND rate_keys IS NOT NULL GROUP BY queue
UNION ALL SELECT queue, state, count(*) FROM sluice_jobs WHERE state = 'scheduled' GROUP BY queue, state
UNION ALL SELECT queue, state, count(*) FROM sluice_jobs WHERE state = 'parked' GROUP BY queue, state
UNION ALL SELECT queue, state, count(*) FROM sluice_jobs WHERE state = 'blocked' GROUP BY queue, state
UNION ALL SELECT queue, state, count(*) FROM sluice_jobs WHERE state = 'running' GROUP BY queue, state
UNION ALL SELECT queue, state, count(*) FROM sluice_jobs WHERE state = 'failed' GROUP BY queue, state
ORDER BY 1, 2`
}

// OldestWaiting finds each queue's oldest waiting job, throttled or not:
// ready jobs, blocked jobs, and jobs a rate limit holds, each through a
// partial index.
func (Dialect) OldestWaiting() string {
	return `SELECT queue, throttled, MIN(created_at) FROM (
  SELECT queue, CASE WHEN wait_key IS NOT NULL THEN 1 ELSE 0 END AS throttled, created_at FROM sluice_jobs WHERE state = 'ready' AND rate_keys IS NULL
  UNION ALL SELECT queue, CASE WHEN wait_key IS NOT NULL THEN 1 ELSE 0 END, created_at FROM sluice_jobs WHERE state = 'ready' AND rate_keys IS NOT NULL
  UNION ALL SELECT queue, 1, created_at FROM sluice_jobs WHERE state = 'blocked'
  UNION ALL SELECT queue, 1, created_at FROM sluice_jobs WHERE wait_key IS NOT NULL AND state IN ('scheduled', 'parked')
) w GROUP BY queue, throttled`
}

// SaveOverride sets a rate-limit override.
func (Dialect) SaveOverride(o engine.OverrideRow) (string, []any) {
	return `INSERT INTO sluice_limit_overrides (target, to_count, per_us, burst, updated_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (target) DO UPDATE SET to_count = EXCLUDED.to_count, per_us = EXCLUDED.per_us, burst = EXCLUDED.burst, updated_at = EXCLUDED.updated_at`, []any{o.Target, o.To, o.PerUS, o.Burst, o.UpdatedAt}
}

// DeleteOverride removes a rate-limit override.
func (Dialect) DeleteOverride(target string) (string, []any) {
	return `DELETE FROM sluice_limit_overrides WHERE target = $1`, []any{target}
}

// ListOverrides lists rate-limit overrides.
func (Dialect) ListOverrides() string {
	return `SELECT target, to_count, per_us, burst, updated_at FROM sluice_limit_overrides ORDER BY target`
}

// ReleaseHolders clears the slots of the keys' holders.
func (Dialect) ReleaseHolders(keys []string) (string, []any) {
	return `UPDATE sluice_jobs SET holds_slot = false WHERE conc_key = ANY($1) AND holds_slot`, []any{keys}
}

// GetBudget reads one budget.
func (Dialect) GetBudget(key string) (string, []any) {
	return `SELECT ` + engine.BudgetColumns + ` FROM sluice_budgets WHERE name = $1`, []any{key}
}

// MoveCursor moves a budget's slot cursor and counts parked jobs, if the
// cursor is still where it was read.
func (Dialect) MoveCursor(key string, from, to int64, parked int) (string, []any) {
	return `UPDATE sluice_budgets SET next_slot_ns = $1, parked = parked + $2 WHERE name = $3 AND next_slot_ns = $4`, []any{to, parked, key, from}
}
