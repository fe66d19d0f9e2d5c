package sqlite

import (
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/sqlgen"
)

// All of SQLite's SQL. Lists are rendered as "?" placeholders by count.

// CreateMigrationsTable creates sluice_migrations.
func (Dialect) CreateMigrationsTable() string {
	return `CREATE TABLE IF NOT EXISTS sluice_migrations (
  version INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  applied_at INTEGER NOT NULL)`
}

// LockMigrations is empty: BEGIN IMMEDIATE already serializes migrators.
func (Dialect) LockMigrations() string { return "" }

// UnlockMigrations is empty.
func (Dialect) UnlockMigrations() string { return "" }

// AppliedMigrations lists applied versions.
func (Dialect) AppliedMigrations() string {
	return `SELECT version FROM sluice_migrations ORDER BY version`
}

// RecordMigration marks a version applied.
func (Dialect) RecordMigration(version int, name string, now int64) (string, []any) {
	return `INSERT INTO sluice_migrations (version, name, applied_at) VALUES (?, ?, ?)`, []any{version, name, now}
}

// ForgetMigration marks a version reverted.
func (Dialect) ForgetMigration(version int) (string, []any) {
	return `DELETE FROM sluice_migrations WHERE version = ?`, []any{version}
}

// InsertJobs inserts jobs and returns their ids.
func (Dialect) InsertJobs(jobs []engine.InsertRow) (string, []any) {
	args := make([]any, 0, len(jobs)*17)
	for _, j := range jobs {
		args = append(args, j.Kind, j.Queue, j.Priority, string(j.State), j.Args, j.MaxAttempts, j.CreatedAt, j.RunAt, j.RateKeys,
			j.ConcKey, j.ConcLimit, j.ConcDuration, sqlgen.Bool(j.ConcDiscard), sqlgen.Bool(j.HoldsSlot), j.LastError, j.FinishedAt, j.Metadata)
	}
	return `INSERT INTO sluice_jobs (kind, queue, priority, state, args, max_attempts, created_at, run_at, rate_keys,
  conc_key, conc_limit, conc_duration, conc_discard, holds_slot, last_error, finished_at, metadata) VALUES ` +
		sqlgen.Tuples(len(jobs), "(?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, ''), ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, 0), NULLIF(?, ''))") + ` RETURNING id`, args
}

// Now is empty: SQLite runs in this process, on the host's clock.
func (Dialect) Now() string { return "" }

// LockReady selects the next ready jobs of an unpaused queue, without or
// with rate limits. BEGIN IMMEDIATE already holds the only write lock.
func (Dialect) LockReady(queue string, limited bool, limit int) (string, []any) {
	if limited {
		return `SELECT ` + engine.JobColumns + ` FROM sluice_jobs
WHERE state = 'ready' AND rate_keys IS NOT NULL AND queue = ?
  AND NOT EXISTS (SELECT 1 FROM sluice_queues WHERE name = ? AND paused = 1)
ORDER BY priority, id LIMIT ?`, []any{queue, queue, limit}
	}
	return `SELECT ` + engine.JobColumns + ` FROM sluice_jobs
WHERE state = 'ready' AND rate_keys IS NULL AND queue = ?
  AND NOT EXISTS (SELECT 1 FROM sluice_queues WHERE name = ? AND paused = 1)
ORDER BY priority, id LIMIT ?`, []any{queue, queue, limit}
}

// LockReadyLike selects ready jobs that draw on exactly the same budgets
// as a parked one and hold no concurrency slot.
func (Dialect) LockReadyLike(queue, kind, rateKeys string, limit int) (string, []any) {
	return `SELECT id FROM sluice_jobs
WHERE state = 'ready' AND rate_keys IS NOT NULL AND queue = ? AND rate_keys = ? AND kind = ? AND holds_slot = 0
ORDER BY priority, id LIMIT ?`, []any{queue, rateKeys, kind, limit}
}

// MarkRunning claims jobs for a process.
func (Dialect) MarkRunning(ids []int64, processID, now int64) (string, []any) {
	return `UPDATE sluice_jobs SET state = 'running', attempt = attempt + 1, process_id = ?, attempted_at = ?, wait_key = NULL,
  coalesce_key = NULL
WHERE id IN (` + sqlgen.List(len(ids)) + `)`, append([]any{processID, now}, sqlgen.Int64s(ids)...)
}

// CompleteJobs marks a process's running jobs completed.
func (Dialect) CompleteJobs(ids []int64, processID, now int64) (string, []any) {
	return `UPDATE sluice_jobs SET state = 'completed', finished_at = ?
WHERE id IN (` + sqlgen.List(len(ids)) + `) AND state = 'running' AND process_id = ?`,
		append(append([]any{now}, sqlgen.Int64s(ids)...), processID)
}

// DeleteJobs deletes a process's running jobs.
func (Dialect) DeleteJobs(ids []int64, processID int64) (string, []any) {
	return `DELETE FROM sluice_jobs WHERE id IN (` + sqlgen.List(len(ids)) + `) AND state = 'running' AND process_id = ?`,
		append(sqlgen.Int64s(ids), processID)
}

// SetJobs applies transitions through a VALUES list.
func (Dialect) SetJobs(from engine.State, processID, now int64, rows []engine.SetRow) (string, []any) {
	args := make([]any, 0, len(rows)*8+4)
	for _, r := range rows {
		args = append(args, r.ID, string(r.State), r.RunAt, r.WaitKey, r.Error, r.AttemptDelta, r.FinishedAt, r.Deferral)
	}
	args = append(args, now, string(from), processID, processID)
	return `WITH v(id, state, run_at, wait_key, last_error, attempt_delta, finished_at, deferral) AS (VALUES ` +
		sqlgen.Tuples(len(rows), "(?, ?, ?, ?, ?, ?, ?, ?)") + `)
UPDATE sluice_jobs SET
  state = v.state,
  run_at = CASE WHEN v.run_at = 0 THEN sluice_jobs.run_at ELSE v.run_at END,
  wait_key = NULLIF(v.wait_key, ''),
  last_error = COALESCE(NULLIF(v.last_error, ''), sluice_jobs.last_error),
  attempt = sluice_jobs.attempt + v.attempt_delta,
  finished_at = NULLIF(v.finished_at, 0),
  coalesce_key = CASE WHEN v.state IN ('completed', 'failed', 'cancelled') THEN NULL ELSE sluice_jobs.coalesce_key END,
  deferrals = sluice_jobs.deferrals + CASE WHEN v.deferral = '' THEN 0 ELSE 1 END,
  deferral_reason = COALESCE(NULLIF(v.deferral, ''), sluice_jobs.deferral_reason),
  deferred_at = CASE WHEN v.deferral = '' OR sluice_jobs.deferred_at > COALESCE(sluice_jobs.attempted_at, 0) THEN sluice_jobs.deferred_at ELSE ? END
FROM v WHERE sluice_jobs.id = v.id AND sluice_jobs.state = ? AND (? = 0 OR sluice_jobs.process_id = ?)`, args
}

// LockDue selects scheduled jobs that are due.
func (Dialect) LockDue(now int64, limit int) (string, []any) {
	return `SELECT id, queue, conc_key, conc_limit, conc_duration, conc_discard, holds_slot FROM sluice_jobs
WHERE state = 'scheduled' AND run_at <= ? ORDER BY run_at, id LIMIT ?`, []any{now, limit}
}

// LockDueWaiting selects the due jobs of the queues that wait on a rate
// limit.
func (Dialect) LockDueWaiting(queues []string, now int64, limit int) (string, []any) {
	return `SELECT ` + engine.JobColumns + `, conc_limit, conc_duration, conc_discard FROM sluice_jobs
WHERE state = 'scheduled' AND run_at <= ? AND wait_key IS NOT NULL AND queue IN (` + sqlgen.List(len(queues)) + `)
ORDER BY run_at, id LIMIT ?`, append(append([]any{now}, sqlgen.Strings(queues)...), limit)
}

// MarkReady makes scheduled jobs ready.
func (Dialect) MarkReady(ids []int64) (string, []any) {
	return `UPDATE sluice_jobs SET state = 'ready' WHERE id IN (` + sqlgen.List(len(ids)) + `) AND state = 'scheduled'`, sqlgen.Int64s(ids)
}

// Notify is empty: workers in other processes poll.
func (Dialect) Notify([]string) (string, []any) { return "", nil }

// InsertProcess registers a process.
func (Dialect) InsertProcess(p engine.ProcessRow) (string, []any) {
	return `INSERT INTO sluice_processes (kind, name, hostname, pid, queues, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		[]any{p.Kind, p.Name, p.Hostname, p.PID, p.Queues, p.StartedAt, p.HeartbeatAt}
}

// Heartbeat stamps a process.
func (Dialect) Heartbeat(id, now int64) (string, []any) {
	return `UPDATE sluice_processes SET heartbeat_at = ? WHERE id = ?`, []any{now, id}
}

// DeleteProcess removes a process.
func (Dialect) DeleteProcess(id int64) (string, []any) {
	return `DELETE FROM sluice_processes WHERE id = ?`, []any{id}
}

// LockDeadProcesses selects processes with a stale heartbeat.
func (Dialect) LockDeadProcesses(before int64, limit int) (string, []any) {
	return `SELECT id FROM sluice_processes WHERE heartbeat_at < ? ORDER BY id LIMIT ?`, []any{before, limit}
}

// LockOrphans selects running jobs of listed or vanished processes.
func (Dialect) LockOrphans(processIDs []int64, limit int) (string, []any) {
	cond := `NOT EXISTS (SELECT 1 FROM sluice_processes p WHERE p.id = sluice_jobs.process_id)`
	args := sqlgen.Int64s(processIDs)
	if len(processIDs) > 0 {
		cond = `process_id IN (` + sqlgen.List(len(processIDs)) + `) OR ` + cond
	}
	return `SELECT id, queue, attempt, max_attempts, conc_key, holds_slot FROM sluice_jobs WHERE state = 'running' AND (` + cond + `) ORDER BY id LIMIT ?`, append(args, limit)
}

// DeleteProcesses removes processes.
func (Dialect) DeleteProcesses(ids []int64) (string, []any) {
	return `DELETE FROM sluice_processes WHERE id IN (` + sqlgen.List(len(ids)) + `)`, sqlgen.Int64s(ids)
}

// ListProcesses lists processes.
func (Dialect) ListProcesses() string {
	return `SELECT ` + engine.ProcessColumns + ` FROM sluice_processes ORDER BY id`
}

// SetQueuePaused pauses or resumes a queue.
func (Dialect) SetQueuePaused(queue string, paused bool, now int64) (string, []any) {
	return `INSERT INTO sluice_queues (name, paused, updated_at) VALUES (?, ?, ?)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at`, []any{queue, sqlgen.Bool(paused), now}
}

// ListQueues lists queues with jobs or pauses.
func (Dialect) ListQueues() string {
	return `SELECT name, MAX(paused) FROM (
  SELECT DISTINCT queue AS name, 0 AS paused FROM sluice_jobs
  UNION ALL SELECT name, paused FROM sluice_queues) q
GROUP BY name ORDER BY name`
}

// LockBudgets selects budgets in key order.
func (Dialect) LockBudgets(keys []string) (string, []any) {
	return `SELECT ` + engine.BudgetColumns + ` FROM sluice_budgets WHERE name IN (` + sqlgen.List(len(keys)) + `) ORDER BY name`, sqlgen.Strings(keys)
}

// InsertBudgets creates missing budgets.
func (Dialect) InsertBudgets(keys []string) (string, []any) {
	return `INSERT INTO sluice_budgets (name) VALUES ` + sqlgen.Tuples(len(keys), "(?)") + ` ON CONFLICT (name) DO NOTHING`, sqlgen.Strings(keys)
}

// SaveBudgets writes budgets back.
func (Dialect) SaveBudgets(rows []engine.BudgetRow) (string, []any) {
	args := make([]any, 0, len(rows)*7)
	for _, r := range rows {
		args = append(args, r.Name, r.TAT, r.NextSlot, r.IntervalNS, r.Burst, r.Parked, r.UpdatedAt)
	}
	return `INSERT INTO sluice_budgets (` + engine.BudgetColumns + `) VALUES ` + sqlgen.Tuples(len(rows), "(?, ?, ?, ?, ?, ?, ?)") + `
ON CONFLICT (name) DO UPDATE SET tat_ns = excluded.tat_ns, next_slot_ns = excluded.next_slot_ns, interval_ns = excluded.interval_ns,
  burst = excluded.burst, parked = excluded.parked, updated_at = excluded.updated_at`, args
}

// LockParkedBudgets selects budgets whose parked jobs may get slots.
func (Dialect) LockParkedBudgets(until int64, limit int) (string, []any) {
	return `SELECT ` + engine.BudgetColumns + ` FROM sluice_budgets WHERE parked > 0 AND next_slot_ns <= ?
ORDER BY next_slot_ns LIMIT ?`, []any{until, limit}
}

// LockParked selects a budget's first parked jobs.
func (Dialect) LockParked(key string, limit int) (string, []any) {
	return `SELECT id, rate_keys FROM sluice_jobs WHERE state = 'parked' AND wait_key = ? ORDER BY priority, id LIMIT ?`, []any{key, limit}
}

// CountParked counts a budget's parked jobs.
func (Dialect) CountParked(key string) (string, []any) {
	return `SELECT count(*) FROM sluice_jobs WHERE state = 'parked' AND wait_key = ?`, []any{key}
}

// LockIdleBudgets selects idle budgets (the transaction holds SQLite's
// only write lock).
func (Dialect) LockIdleBudgets(now int64, limit int) (string, []any) {
	return `SELECT ` + engine.BudgetColumns + ` FROM sluice_budgets WHERE tat_ns <= ? AND next_slot_ns <= ? AND parked = 0 LIMIT ?`, []any{now, now, limit}
}

// DeleteBudgets deletes budgets by name.
func (Dialect) DeleteBudgets(names []string) (string, []any) {
	return `DELETE FROM sluice_budgets WHERE name IN (` + sqlgen.List(len(names)) + `)`, sqlgen.Strings(names)
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
WHERE (? = '' OR state = ?) AND (? = '' OR kind = ?) AND (? = '' OR queue = ?)
ORDER BY id DESC LIMIT ?`, []any{string(f.State), string(f.State), f.Kind, f.Kind, f.Queue, f.Queue, f.Limit}
}

// GetJob reads one job.
func (Dialect) GetJob(id int64) (string, []any) {
	return `SELECT ` + engine.JobInfoColumns + ` FROM sluice_jobs WHERE id = ?`, []any{id}
}

// LockFinished locks old completed and cancelled jobs.
func (Dialect) LockFinished(before int64, limit int) (string, []any) {
	return `SELECT id, calls FROM sluice_jobs WHERE state IN ('completed', 'cancelled') AND finished_at < ?
LIMIT ?`, []any{before, limit}
}

// DeleteJobsByID deletes jobs.
func (Dialect) DeleteJobsByID(ids []int64) (string, []any) {
	return `DELETE FROM sluice_jobs WHERE id IN (` + sqlgen.List(len(ids)) + `)`, sqlgen.Int64s(ids)
}

// LockSemaphores locks semaphores in key order.
func (Dialect) LockSemaphores(keys []string) (string, []any) {
	return `SELECT ` + engine.SemaphoreColumns + ` FROM sluice_semaphores WHERE name IN (` + sqlgen.List(len(keys)) + `) ORDER BY name`, sqlgen.Strings(keys)
}

// InsertSemaphores creates missing semaphores.
func (Dialect) InsertSemaphores(keys []string) (string, []any) {
	return `INSERT INTO sluice_semaphores (name) VALUES ` + sqlgen.Tuples(len(keys), "(?)") + ` ON CONFLICT (name) DO NOTHING`, sqlgen.Strings(keys)
}

// SaveSemaphores writes semaphores back.
func (Dialect) SaveSemaphores(rows []engine.SemaphoreRow) (string, []any) {
	args := make([]any, 0, len(rows)*6)
	for _, r := range rows {
		args = append(args, r.Name, r.Held, r.Limit, r.DurationUS, r.ExpiresAt, r.UpdatedAt)
	}
	return `INSERT INTO sluice_semaphores (` + engine.SemaphoreColumns + `) VALUES ` + sqlgen.Tuples(len(rows), "(?, ?, ?, ?, ?, ?)") + `
ON CONFLICT (name) DO UPDATE SET held = excluded.held, limit_to = excluded.limit_to, duration_us = excluded.duration_us,
  expires_at = excluded.expires_at, updated_at = excluded.updated_at`, args
}

// LockBlocked locks a key's first blocked jobs.
func (Dialect) LockBlocked(key string, limit int) (string, []any) {
	return `SELECT id, queue FROM sluice_jobs WHERE conc_key = ? AND state = 'blocked'
ORDER BY priority, id LIMIT ?`, []any{key, limit}
}

// MarkSlots records whether jobs hold a slot.
func (Dialect) MarkSlots(ids []int64, holds bool) (string, []any) {
	return `UPDATE sluice_jobs SET holds_slot = ? WHERE id IN (` + sqlgen.List(len(ids)) + `)`, append([]any{sqlgen.Bool(holds)}, sqlgen.Int64s(ids)...)
}

// LockSlotHolders locks the listed jobs that hold a slot.
func (Dialect) LockSlotHolders(ids []int64, processID int64) (string, []any) {
	return `SELECT id, conc_key FROM sluice_jobs WHERE id IN (` + sqlgen.List(len(ids)) + `) AND holds_slot = 1
  AND (? = 0 OR (state = 'running' AND process_id = ?)) ORDER BY id`, append(sqlgen.Int64s(ids), processID, processID)
}

// LockExpiredSemaphores locks semaphores whose taken slots expired.
func (Dialect) LockExpiredSemaphores(now int64, limit int) (string, []any) {
	return `SELECT ` + engine.SemaphoreColumns + ` FROM sluice_semaphores WHERE held > 0 AND expires_at < ?
ORDER BY expires_at LIMIT ?`, []any{now, limit}
}

// BlockedKeys finds keys with blocked jobs and a free slot.
func (Dialect) BlockedKeys(limit int) (string, []any) {
	return `SELECT DISTINCT j.conc_key FROM sluice_jobs j LEFT JOIN sluice_semaphores s ON s.name = j.conc_key
WHERE j.state = 'blocked' AND (s.name IS NULL OR s.held < s.limit_to) LIMIT ?`, []any{limit}
}

// ListSemaphores lists semaphores with their jobs.
func (Dialect) ListSemaphores() string {
	return `SELECT ` + engine.SemaphoreColumns + `,
  (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.state = 'blocked'),
  (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.holds_slot = 1)
FROM sluice_semaphores s ORDER BY name`
}

// LockJob reads and locks one job.
func (Dialect) LockJob(id int64) (string, []any) {
	return `SELECT ` + engine.JobInfoColumns + ` FROM sluice_jobs WHERE id = ?`, []any{id}
}

// InsertCoalescing inserts a job unless a pending job holds its coalesce
// key.
func (Dialect) InsertCoalescing(j engine.InsertRow) (string, []any) {
	return `INSERT INTO sluice_jobs (kind, queue, priority, state, args, max_attempts, created_at, run_at, rate_keys,
  conc_key, conc_limit, conc_duration, conc_discard, holds_slot, coalesce_key, first_call_at, metadata)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, ''), ?, ?, ?, ?, ?, ?, NULLIF(?, ''))
ON CONFLICT (coalesce_key) WHERE coalesce_key IS NOT NULL DO NOTHING RETURNING id`,
		[]any{j.Kind, j.Queue, j.Priority, string(j.State), j.Args, j.MaxAttempts, j.CreatedAt, j.RunAt, j.RateKeys,
			j.ConcKey, j.ConcLimit, j.ConcDuration, sqlgen.Bool(j.ConcDiscard), sqlgen.Bool(j.HoldsSlot), j.CoalesceKey, j.FirstCallAt, j.Metadata}
}

// LockPending locks the pending job that holds a coalesce key.
func (Dialect) LockPending(key string) (string, []any) {
	return `SELECT ` + engine.JobInfoColumns + `, first_call_at FROM sluice_jobs WHERE coalesce_key = ?`, []any{key}
}

// UpdateCoalesced applies a joining call to the pending job.
func (Dialect) UpdateCoalesced(u engine.CoalesceUpdate) (string, []any) {
	return `UPDATE sluice_jobs SET
  args = CASE WHEN ? = '' THEN args ELSE ? END,
  calls = ?,
  state = ?,
  run_at = CASE WHEN ? = 0 THEN run_at ELSE ? END,
  coalesce_key = CASE WHEN ? THEN NULL ELSE coalesce_key END
WHERE id = ?`, []any{u.Args, u.Args, u.Calls, string(u.State), u.RunAt, u.RunAt, sqlgen.Bool(u.ReleaseKey), u.ID}
}

// InsertCall stores one collected call.
func (Dialect) InsertCall(jobID int64, seq int, args string, now int64) (string, []any) {
	return `INSERT INTO sluice_calls (job_id, seq, args, created_at) VALUES (?, ?, ?, ?)`, []any{jobID, seq, args, now}
}

// LoadCalls reads collected calls.
func (Dialect) LoadCalls(jobIDs []int64) (string, []any) {
	return `SELECT job_id, args FROM sluice_calls WHERE job_id IN (` + sqlgen.List(len(jobIDs)) + `) ORDER BY job_id, seq`, sqlgen.Int64s(jobIDs)
}

// DeleteCalls deletes collected calls.
func (Dialect) DeleteCalls(jobIDs []int64) (string, []any) {
	return `DELETE FROM sluice_calls WHERE job_id IN (` + sqlgen.List(len(jobIDs)) + `)`, sqlgen.Int64s(jobIDs)
}

// InsertTick records a recurring task's tick unless it is recorded.
func (Dialect) InsertTick(task string, runAt, now int64) (string, []any) {
	return `INSERT INTO sluice_recurring_runs (task, run_at, ran_at) VALUES (?, ?, ?) ON CONFLICT (task, run_at) DO NOTHING`, []any{task, runAt, now}
}

// SetTickJob records the job a tick enqueued.
func (Dialect) SetTickJob(task string, runAt, jobID int64) (string, []any) {
	return `UPDATE sluice_recurring_runs SET job_id = ? WHERE task = ? AND run_at = ?`, []any{jobID, task, runAt}
}

// LastTicks lists each task's latest tick.
func (Dialect) LastTicks() string {
	return `SELECT r.task, r.run_at, r.ran_at, r.job_id FROM sluice_recurring_runs r
JOIN (SELECT task, MAX(run_at) AS run_at FROM sluice_recurring_runs GROUP BY task) l ON l.task = r.task AND l.run_at = r.run_at
ORDER BY r.task`
}

// DeleteTicks deletes old tick records.
func (Dialect) DeleteTicks(before int64) (string, []any) {
	return `DELETE FROM sluice_recurring_runs WHERE run_at < ?`, []any{before}
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
	return `INSERT INTO sluice_limit_overrides (target, to_count, per_us, burst, updated_at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (target) DO UPDATE SET to_count = excluded.to_count, per_us = excluded.per_us, burst = excluded.burst, updated_at = excluded.updated_at`, []any{o.Target, o.To, o.PerUS, o.Burst, o.UpdatedAt}
}

// DeleteOverride removes a rate-limit override.
func (Dialect) DeleteOverride(target string) (string, []any) {
	return `DELETE FROM sluice_limit_overrides WHERE target = ?`, []any{target}
}

// ListOverrides lists rate-limit overrides.
func (Dialect) ListOverrides() string {
	return `SELECT target, to_count, per_us, burst, updated_at FROM sluice_limit_overrides ORDER BY target`
}

// ReleaseHolders clears the slots of the keys' holders.
func (Dialect) ReleaseHolders(keys []string) (string, []any) {
	return `UPDATE sluice_jobs SET holds_slot = 0 WHERE conc_key IN (` + sqlgen.List(len(keys)) + `) AND holds_slot = 1`, sqlgen.Strings(keys)
}

// GetBudget reads one budget.
func (Dialect) GetBudget(key string) (string, []any) {
	return `SELECT ` + engine.BudgetColumns + ` FROM sluice_budgets WHERE name = ?`, []any{key}
}

// MoveCursor moves a budget's slot cursor and counts parked jobs, if the
// cursor is still where it was read.
func (Dialect) MoveCursor(key string, from, to int64, parked int) (string, []any) {
	return `UPDATE sluice_budgets SET next_slot_ns = ?, parked = parked + ? WHERE name = ? AND next_slot_ns = ?`, []any{to, parked, key, from}
}
