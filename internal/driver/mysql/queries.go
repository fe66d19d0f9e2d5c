package mysql

import (
	"strings"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/sqlgen"
)

// All of MySQL's SQL. Lists are rendered as "?" placeholders by count. A
// locking read does not lock the rows its subqueries read, so the paused
// check inside a claim takes no lock on the queue row.

// CreateMigrationsTable creates sluice_migrations.
func (Dialect) CreateMigrationsTable() string {
	return `CREATE TABLE IF NOT EXISTS sluice_migrations (
  version INT NOT NULL PRIMARY KEY,
  name VARCHAR(255) NOT NULL,
  applied_at BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
}

// LockMigrations takes a named lock (DDL commits implicitly on MySQL, so a
// transaction cannot serialize migrators).
func (Dialect) LockMigrations() string { return `SELECT GET_LOCK('sluice_migrations', 60)` }

// UnlockMigrations releases the named lock.
func (Dialect) UnlockMigrations() string { return `SELECT RELEASE_LOCK('sluice_migrations')` }

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

// InsertJobs inserts jobs in one multi-row statement; their ids are
// consecutive from the first the server reports.
func (Dialect) InsertJobs(jobs []engine.InsertRow) (string, []any) {
	args := make([]any, 0, len(jobs)*17)
	for _, j := range jobs {
		args = append(args, j.Kind, j.Queue, j.Priority, string(j.State), j.Args, j.MaxAttempts, j.CreatedAt, j.RunAt, j.RateKeys,
			j.ConcKey, j.ConcLimit, j.ConcDuration, sqlgen.Bool(j.ConcDiscard), sqlgen.Bool(j.HoldsSlot), j.LastError, j.FinishedAt, j.Metadata)
	}
	return `INSERT INTO sluice_jobs (kind, queue, priority, state, args, max_attempts, created_at, run_at, rate_keys,
  conc_key, conc_limit, conc_duration, conc_discard, holds_slot, last_error, finished_at, metadata) VALUES ` +
		sqlgen.Tuples(len(jobs), "(?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, ''), ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, 0), NULLIF(?, ''))"), args
}

// Now reads SYSDATE(6): the time now, not at the statement's start.
func (Dialect) Now() string {
	return `SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)`
}

// LockReady locks the next ready jobs of an unpaused queue, without or
// with rate limits.
func (Dialect) LockReady(queue string, limited bool, limit int) (string, []any) {
	if limited {
		return `SELECT ` + engine.JobColumns + ` FROM sluice_jobs
WHERE ready_limited = ?
  AND NOT EXISTS (SELECT 1 FROM sluice_queues WHERE name = ? AND paused = 1)
ORDER BY priority, id LIMIT ? FOR UPDATE SKIP LOCKED`, []any{queue, queue, limit}
	}
	return `SELECT ` + engine.JobColumns + ` FROM sluice_jobs
WHERE ready_plain = ?
  AND NOT EXISTS (SELECT 1 FROM sluice_queues WHERE name = ? AND paused = 1)
ORDER BY priority, id LIMIT ? FOR UPDATE SKIP LOCKED`, []any{queue, queue, limit}
}

// LockReadyLike locks ready jobs that draw on exactly the same budgets as
// a parked one and hold no concurrency slot.
func (Dialect) LockReadyLike(queue, kind, rateKeys string, limit int) (string, []any) {
	return `SELECT id FROM sluice_jobs
WHERE ready_limited = ? AND rate_keys = ? AND kind = ? AND holds_slot = 0
ORDER BY priority, id LIMIT ? FOR UPDATE SKIP LOCKED`, []any{queue, rateKeys, kind, limit}
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

// SetJobs applies transitions by joining a derived table of their values.
func (Dialect) SetJobs(from engine.State, processID, now int64, rows []engine.SetRow) (string, []any) {
	args := make([]any, 0, len(rows)*8+4)
	for _, r := range rows {
		args = append(args, r.ID, string(r.State), r.RunAt, r.WaitKey, r.Error, r.AttemptDelta, r.FinishedAt, r.Deferral)
	}
	args = append(args, now, string(from), processID, processID)
	return `UPDATE sluice_jobs j JOIN (
  SELECT ? AS id, ? AS state, ? AS run_at, ? AS wait_key, ? AS last_error, ? AS attempt_delta, ? AS finished_at, ? AS deferral` +
		repeatUnion(len(rows)-1) + `) v ON j.id = v.id
SET j.state = v.state,
  j.run_at = IF(v.run_at = 0, j.run_at, v.run_at),
  j.wait_key = NULLIF(v.wait_key, ''),
  j.last_error = COALESCE(NULLIF(v.last_error, ''), j.last_error),
  j.attempt = j.attempt + v.attempt_delta,
  j.finished_at = NULLIF(v.finished_at, 0),
  j.coalesce_key = IF(v.state IN ('completed', 'failed', 'cancelled'), NULL, j.coalesce_key),
  j.deferrals = j.deferrals + IF(v.deferral = '', 0, 1),
  j.deferral_reason = COALESCE(NULLIF(v.deferral, ''), j.deferral_reason),
  j.deferred_at = IF(v.deferral = '' OR j.deferred_at > COALESCE(j.attempted_at, 0), j.deferred_at, ?)
WHERE j.state = ? AND (? = 0 OR j.process_id = ?)`, args
}

// repeatUnion returns n more rows of SetJobs' derived table.
func repeatUnion(n int) string {
	return strings.Repeat("\n  UNION ALL SELECT ?, ?, ?, ?, ?, ?, ?, ?", max(n, 0))
}

// LockDue locks scheduled jobs that are due.
func (Dialect) LockDue(now int64, limit int) (string, []any) {
	return `SELECT id, queue, conc_key, conc_limit, conc_duration, conc_discard, holds_slot FROM sluice_jobs
WHERE due_at <= ?
ORDER BY due_at, id LIMIT ? FOR UPDATE SKIP LOCKED`, []any{now, limit}
}

// LockDueWaiting locks the due jobs of the queues that wait on a rate
// limit.
func (Dialect) LockDueWaiting(queues []string, now int64, limit int) (string, []any) {
	return `SELECT ` + engine.JobColumns + `, conc_limit, conc_duration, conc_discard FROM sluice_jobs
WHERE due_at <= ? AND wait_key IS NOT NULL AND queue IN (` + sqlgen.List(len(queues)) + `)
ORDER BY due_at, id LIMIT ? FOR UPDATE SKIP LOCKED`, append(append([]any{now}, sqlgen.Strings(queues)...), limit)
}

// MarkReady makes scheduled jobs ready.
func (Dialect) MarkReady(ids []int64) (string, []any) {
	return `UPDATE sluice_jobs SET state = 'ready' WHERE id IN (` + sqlgen.List(len(ids)) + `) AND state = 'scheduled'`, sqlgen.Int64s(ids)
}

// Notify is empty: workers in other processes poll.
func (Dialect) Notify([]string) (string, []any) { return "", nil }

// InsertProcess registers a process.
func (Dialect) InsertProcess(p engine.ProcessRow) (string, []any) {
	return `INSERT INTO sluice_processes (kind, name, hostname, pid, queues, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
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

// LockDeadProcesses locks processes with a stale heartbeat.
func (Dialect) LockDeadProcesses(before int64, limit int) (string, []any) {
	return `SELECT id FROM sluice_processes WHERE heartbeat_at < ? ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED`, []any{before, limit}
}

// LockOrphans locks running jobs of listed or vanished processes.
func (Dialect) LockOrphans(processIDs []int64, limit int) (string, []any) {
	cond := `NOT EXISTS (SELECT 1 FROM sluice_processes p WHERE p.id = j.running_process)`
	args := sqlgen.Int64s(processIDs)
	if len(processIDs) > 0 {
		cond = `j.running_process IN (` + sqlgen.List(len(processIDs)) + `) OR ` + cond
	}
	return `SELECT id, queue, attempt, max_attempts, conc_key, holds_slot FROM sluice_jobs j WHERE running_process IS NOT NULL AND (` + cond + `)
ORDER BY running_process, id LIMIT ? FOR UPDATE SKIP LOCKED`, append(args, limit)
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
ON DUPLICATE KEY UPDATE paused = VALUES(paused), updated_at = VALUES(updated_at)`, []any{queue, sqlgen.Bool(paused), now}
}

// ListQueues lists queues with jobs or pauses.
func (Dialect) ListQueues() string {
	return `SELECT name, MAX(paused) <> 0 FROM (
  SELECT DISTINCT queue AS name, 0 AS paused FROM sluice_jobs
  UNION ALL SELECT name, paused FROM sluice_queues) q
GROUP BY name ORDER BY name`
}

// LockBudgets locks budgets in key order.
func (Dialect) LockBudgets(keys []string) (string, []any) {
	return `SELECT ` + engine.BudgetColumns + ` FROM sluice_budgets WHERE name IN (` + sqlgen.List(len(keys)) + `) ORDER BY name FOR UPDATE`, sqlgen.Strings(keys)
}

// InsertBudgets creates missing budgets.
func (Dialect) InsertBudgets(keys []string) (string, []any) {
	return `INSERT INTO sluice_budgets (name) VALUES ` + sqlgen.Tuples(len(keys), "(?)") + ` ON DUPLICATE KEY UPDATE name = name`, sqlgen.Strings(keys)
}

// SaveBudgets writes budgets back.
func (Dialect) SaveBudgets(rows []engine.BudgetRow) (string, []any) {
	args := make([]any, 0, len(rows)*7)
	for _, r := range rows {
		args = append(args, r.Name, r.TAT, r.NextSlot, r.IntervalNS, r.Burst, r.Parked, r.UpdatedAt)
	}
	return `INSERT INTO sluice_budgets (` + engine.BudgetColumns + `) VALUES ` + sqlgen.Tuples(len(rows), "(?, ?, ?, ?, ?, ?, ?)") + `
ON DUPLICATE KEY UPDATE tat_ns = VALUES(tat_ns), next_slot_ns = VALUES(next_slot_ns), interval_ns = VALUES(interval_ns),
  burst = VALUES(burst), parked = VALUES(parked), updated_at = VALUES(updated_at)`, args
}

// LockParkedBudgets locks budgets whose parked jobs may get slots.
func (Dialect) LockParkedBudgets(until int64, limit int) (string, []any) {
	return `SELECT ` + engine.BudgetColumns + ` FROM sluice_budgets WHERE parked > 0 AND next_slot_ns <= ?
ORDER BY next_slot_ns LIMIT ? FOR UPDATE SKIP LOCKED`, []any{until, limit}
}

// LockParked locks a budget's first parked jobs.
func (Dialect) LockParked(key string, limit int) (string, []any) {
	return `SELECT id, rate_keys FROM sluice_jobs WHERE parked_key = ?
ORDER BY priority, id LIMIT ? FOR UPDATE SKIP LOCKED`, []any{key, limit}
}

// CountParked counts a budget's parked jobs, locked or not.
func (Dialect) CountParked(key string) (string, []any) {
	return `SELECT count(*) FROM sluice_jobs WHERE parked_key = ?`, []any{key}
}

// LockIdleBudgets locks idle budgets no claim holds. (A DELETE cannot
// skip locked rows on MySQL, even through a derived table: it waits for
// them, so the budgets are locked first and deleted by name.)
func (Dialect) LockIdleBudgets(now int64, limit int) (string, []any) {
	return `SELECT ` + engine.BudgetColumns + ` FROM sluice_budgets WHERE tat_ns <= ? AND next_slot_ns <= ? AND parked = 0
LIMIT ? FOR UPDATE SKIP LOCKED`, []any{now, now, limit}
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
	return `SELECT id, calls FROM sluice_jobs WHERE done_at < ?
LIMIT ? FOR UPDATE SKIP LOCKED`, []any{before, limit}
}

// DeleteJobsByID deletes jobs.
func (Dialect) DeleteJobsByID(ids []int64) (string, []any) {
	return `DELETE FROM sluice_jobs WHERE id IN (` + sqlgen.List(len(ids)) + `)`, sqlgen.Int64s(ids)
}

// LockSemaphores locks semaphores in key order.
func (Dialect) LockSemaphores(keys []string) (string, []any) {
	return `SELECT ` + engine.SemaphoreColumns + ` FROM sluice_semaphores WHERE name IN (` + sqlgen.List(len(keys)) + `) ORDER BY name FOR UPDATE`, sqlgen.Strings(keys)
}

// InsertSemaphores creates missing semaphores.
func (Dialect) InsertSemaphores(keys []string) (string, []any) {
	return `INSERT INTO sluice_semaphores (name) VALUES ` + sqlgen.Tuples(len(keys), "(?)") + ` ON DUPLICATE KEY UPDATE name = name`, sqlgen.Strings(keys)
}

// SaveSemaphores writes semaphores back.
func (Dialect) SaveSemaphores(rows []engine.SemaphoreRow) (string, []any) {
	args := make([]any, 0, len(rows)*6)
	for _, r := range rows {
		args = append(args, r.Name, r.Held, r.Limit, r.DurationUS, r.ExpiresAt, r.UpdatedAt)
	}
	return `INSERT INTO sluice_semaphores (` + engine.SemaphoreColumns + `) VALUES ` + sqlgen.Tuples(len(rows), "(?, ?, ?, ?, ?, ?)") + `
ON DUPLICATE KEY UPDATE held = VALUES(held), limit_to = VALUES(limit_to), duration_us = VALUES(duration_us),
  expires_at = VALUES(expires_at), updated_at = VALUES(updated_at)`, args
}

// LockBlocked locks a key's first blocked jobs.
func (Dialect) LockBlocked(key string, limit int) (string, []any) {
	return `SELECT id, queue FROM sluice_jobs WHERE blocked_key = ?
ORDER BY priority, id LIMIT ? FOR UPDATE SKIP LOCKED`, []any{key, limit}
}

// MarkSlots records whether jobs hold a slot.
func (Dialect) MarkSlots(ids []int64, holds bool) (string, []any) {
	return `UPDATE sluice_jobs SET holds_slot = ? WHERE id IN (` + sqlgen.List(len(ids)) + `)`, append([]any{sqlgen.Bool(holds)}, sqlgen.Int64s(ids)...)
}

// LockSlotHolders locks the listed jobs that hold a slot.
func (Dialect) LockSlotHolders(ids []int64, processID int64) (string, []any) {
	return `SELECT id, conc_key FROM sluice_jobs WHERE id IN (` + sqlgen.List(len(ids)) + `) AND holds_slot = 1
  AND (? = 0 OR (state = 'running' AND process_id = ?)) ORDER BY id FOR UPDATE`, append(sqlgen.Int64s(ids), processID, processID)
}

// LockExpiredSemaphores locks semaphores whose taken slots expired.
func (Dialect) LockExpiredSemaphores(now int64, limit int) (string, []any) {
	return `SELECT ` + engine.SemaphoreColumns + ` FROM sluice_semaphores WHERE held > 0 AND expires_at < ?
ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED`, []any{now, limit}
}

// BlockedKeys finds keys with blocked jobs and a free slot.
func (Dialect) BlockedKeys(limit int) (string, []any) {
	return `SELECT DISTINCT j.blocked_key FROM sluice_jobs j LEFT JOIN sluice_semaphores s ON s.name = j.blocked_key
WHERE j.blocked_key IS NOT NULL AND (s.name IS NULL OR s.held < s.limit_to) LIMIT ?`, []any{limit}
}

// ListSemaphores lists semaphores with their jobs.
func (Dialect) ListSemaphores() string {
	return `SELECT ` + engine.SemaphoreColumns + `,
  (SELECT count(*) FROM sluice_jobs j WHERE j.blocked_key = s.name),
  (SELECT count(*) FROM sluice_jobs j WHERE j.conc_key = s.name AND j.holds_slot = 1)
FROM sluice_semaphores s ORDER BY name`
}

// LockJob reads and locks one job.
func (Dialect) LockJob(id int64) (string, []any) {
	return `SELECT ` + engine.JobInfoColumns + ` FROM sluice_jobs WHERE id = ? FOR UPDATE`, []any{id}
}

// InsertCoalescing inserts a job unless a pending job holds its coalesce
// key.
func (Dialect) InsertCoalescing(j engine.InsertRow) (string, []any) {
	return `INSERT INTO sluice_jobs (kind, queue, priority, state, args, max_attempts, created_at, run_at, rate_keys,
  conc_key, conc_limit, conc_duration, conc_discard, holds_slot, coalesce_key, first_call_at, metadata)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, ''), ?, ?, ?, ?, ?, ?, NULLIF(?, ''))
ON DUPLICATE KEY UPDATE coalesce_key = coalesce_key`,
		[]any{j.Kind, j.Queue, j.Priority, string(j.State), j.Args, j.MaxAttempts, j.CreatedAt, j.RunAt, j.RateKeys,
			j.ConcKey, j.ConcLimit, j.ConcDuration, sqlgen.Bool(j.ConcDiscard), sqlgen.Bool(j.HoldsSlot), j.CoalesceKey, j.FirstCallAt, j.Metadata}
}

// LockPending locks the pending job that holds a coalesce key.
func (Dialect) LockPending(key string) (string, []any) {
	return `SELECT ` + engine.JobInfoColumns + `, first_call_at FROM sluice_jobs WHERE coalesce_key = ? FOR UPDATE`, []any{key}
}

// UpdateCoalesced applies a joining call to the pending job.
func (Dialect) UpdateCoalesced(u engine.CoalesceUpdate) (string, []any) {
	return `UPDATE sluice_jobs SET
  args = IF(? = '', args, ?),
  calls = ?,
  state = ?,
  run_at = IF(? = 0, run_at, ?),
  coalesce_key = IF(?, NULL, coalesce_key)
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
	return `INSERT INTO sluice_recurring_runs (task, run_at, ran_at) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE task = task`, []any{task, runAt, now}
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
// through its own key, so finished jobs are never read.
func (Dialect) UnfinishedByState() string {
	return `SELECT ready_plain, 'ready', count(*) FROM sluice_jobs WHERE ready_plain IS NOT NULL GROUP BY ready_plain
UNION ALL SELECT ready_limited, 'ready', count(*) FROM sluice_jobs WHERE ready_limited IS NOT NULL GROUP BY ready_limited
UNION ALL SELECT queue, 'scheduled', count(*) FROM sluice_jobs WHERE due_at IS NOT NULL GROUP BY queue
UNION ALL SELECT queue, 'parked', count(*) FROM sluice_jobs WHERE parked_key IS NOT NULL GROUP BY queue
UNION ALL SELECT queue, 'blocked', count(*) FROM sluice_jobs WHERE blocked_key IS NOT NULL GROUP BY queue
UNION ALL SELECT queue, 'running', count(*) FROM sluice_jobs WHERE running_process IS NOT NULL GROUP BY queue
UNION ALL SELECT failed_queue, 'failed', count(*) FROM sluice_jobs WHERE failed_queue IS NOT NULL GROUP BY failed_queue
ORDER BY 1, 2`
}

// OldestWaiting finds each queue's oldest waiting job, throttled or not:
// ready jobs, blocked jobs, and jobs a rate limit holds.
func (Dialect) OldestWaiting() string {
	return `SELECT queue, throttled, MIN(created_at) FROM (
  SELECT queue, wait_key IS NOT NULL AS throttled, created_at FROM sluice_jobs WHERE ready_plain IS NOT NULL
  UNION ALL SELECT queue, wait_key IS NOT NULL, created_at FROM sluice_jobs WHERE ready_limited IS NOT NULL
  UNION ALL SELECT queue, 1, created_at FROM sluice_jobs WHERE blocked_key IS NOT NULL
  UNION ALL SELECT queue, 1, created_at FROM sluice_jobs WHERE wait_key IS NOT NULL AND state IN ('scheduled', 'parked')
) w GROUP BY queue, throttled`
}

// SaveOverride sets a rate-limit override.
func (Dialect) SaveOverride(o engine.OverrideRow) (string, []any) {
	return `INSERT INTO sluice_limit_overrides (target, to_count, per_us, burst, updated_at) VALUES (?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE to_count = VALUES(to_count), per_us = VALUES(per_us), burst = VALUES(burst), updated_at = VALUES(updated_at)`, []any{o.Target, o.To, o.PerUS, o.Burst, o.UpdatedAt}
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
