package mysql

import (
	"github.com/sluicequeue/sluice/internal/engine"
)

// The dashboard's and Explain's SQL (engine.DashboardDialect). A job
// state is selected through its generated per-state key, written into the
// text from the fixed set of states.

var _ engine.DashboardDialect = Dialect{}

// FinishedSince counts recently finished jobs per queue, state and
// bucket, through the finished and failed keys.
func (Dialect) FinishedSince(since, bucket int64) (string, []any) {
	return `SELECT queue, state, done_at DIV ?, count(*) FROM sluice_jobs WHERE done_at >= ? GROUP BY 1, 2, 3
UNION ALL SELECT queue, state, finished_at DIV ?, count(*) FROM sluice_jobs
WHERE failed_queue IS NOT NULL AND finished_at >= ? GROUP BY 1, 2, 3`, []any{bucket, since, bucket, since}
}

// AdmittedSince lists the rate keys and claim times of recently claimed
// jobs that are running or finished, read through the finished, failed
// and running keys; with a key, those that carry it (a line of rate_keys
// is the key, or the key, a tab and its cost). CHAR(n) is a binary
// string, so the key is matched byte for byte.
func (Dialect) AdmittedSince(key string, since int64, limit int) (string, []any) {
	args := []any{since, since, since, since, since, limit}
	if key == "" {
		return engine.AdmittedOf(admittedScan, ""), args
	}
	return engine.AdmittedOf(admittedScan, `INSTR(CONCAT(CHAR(10), rate_keys, CHAR(10)), CONCAT(CHAR(10), ?, CHAR(10))) > 0
  OR INSTR(CONCAT(CHAR(10), rate_keys), CONCAT(CHAR(10), ?, CHAR(9))) > 0`), append(args, key, key)
}

// admittedScan reads the rate keys and claim times of up to limit jobs
// claimed since a time that are running or finished: its arguments are
// the time five times, then the limit.
const admittedScan = `SELECT rate_keys, attempted_at FROM sluice_jobs
WHERE done_at >= ? AND attempted_at >= ? AND rate_keys IS NOT NULL
UNION ALL SELECT rate_keys, attempted_at FROM sluice_jobs
WHERE failed_queue IS NOT NULL AND finished_at >= ? AND attempted_at >= ? AND rate_keys IS NOT NULL
UNION ALL SELECT rate_keys, attempted_at FROM sluice_jobs
WHERE running_process IS NOT NULL AND attempted_at >= ? AND rate_keys IS NOT NULL
LIMIT ?`

// PausedQueues lists the queues ever paused or resumed.
func (Dialect) PausedQueues() string {
	return `SELECT name, paused <> 0 FROM sluice_queues ORDER BY name`
}

// QueuePaused reads whether a queue is paused.
func (Dialect) QueuePaused(queue string) (string, []any) {
	return `SELECT paused <> 0 FROM sluice_queues WHERE name = ?`, []any{queue}
}

// CoalesceKey reads the coalesce key a job holds.
func (Dialect) CoalesceKey(id int64) (string, []any) {
	return `SELECT coalesce_key FROM sluice_jobs WHERE id = ?`, []any{id}
}

// ReadyAhead counts the ready jobs of a queue before (priority, id), in
// the three ready keys (fair jobs counted by id too: an estimate).
func (Dialect) ReadyAhead(queue string, priority int, id int64, limit int) (string, []any) {
	return `SELECT (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs WHERE ready_plain = ?
    AND (priority < ? OR (priority = ? AND id < ?)) LIMIT ?) a)
  + (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs WHERE ready_limited = ?
    AND (priority < ? OR (priority = ? AND id < ?)) LIMIT ?) b)
  + (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs WHERE ready_fair = ?
    AND (priority < ? OR (priority = ? AND id < ?)) LIMIT ?) c)`,
		[]any{queue, priority, priority, id, limit, queue, priority, priority, id, limit, queue, priority, priority, id, limit}
}

// ParkedAhead counts the jobs parked on a budget that get slots before
// the job (priority, id), in the two parked keys: the budget's jobs
// without a fairness key before (priority, id), and its fair jobs before
// the job's (priority, fair_start, id) when it is fair, else before
// (priority, id); of the job's own queue and of queues not paused, as
// LockParked passes another paused queue's jobs over. (Unparking merges
// the two streams at their heads: an estimate, as ReadyAhead's.)
func (Dialect) ParkedAhead(key, queue string, priority int, id int64, limit int) (string, []any) {
	return `SELECT (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs j WHERE j.parked_plain = ?
    AND (j.priority < ? OR (j.priority = ? AND j.id < ?)) AND (j.queue = ? OR ` + engine.JobQueueNotPaused + `) LIMIT ?) a)
  + (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs j JOIN sluice_jobs me ON me.id = ?
    WHERE j.parked_fair = ? AND j.priority <= ?
    AND (j.priority < ? OR IF(me.fair_key IS NULL, j.id < ?,
      j.fair_start < me.fair_start OR (j.fair_start = me.fair_start AND j.id < ?)))
    AND (j.queue = ? OR ` + engine.JobQueueNotPaused + `) LIMIT ?) b)`,
		[]any{key, priority, priority, id, queue, limit, id, key, priority, priority, id, id, queue, limit}
}

// SlotsAhead counts the jobs holding a budget's slots before (run_at,
// id).
func (Dialect) SlotsAhead(key string, runAt, id int64, limit int) (string, []any) {
	return `SELECT count(*) FROM (SELECT 1 FROM sluice_jobs WHERE wait_key = ? AND due_at IS NOT NULL
  AND (run_at < ? OR (run_at = ? AND id < ?)) LIMIT ?) c`, []any{key, runAt, runAt, id, limit}
}

// BlockedAhead counts the jobs blocked on a key before (priority, id), of
// the job's own queue and of queues not paused, as LockBlocked passes
// another paused queue's jobs over.
func (Dialect) BlockedAhead(key, queue string, priority int, id int64, limit int) (string, []any) {
	return `SELECT count(*) FROM (SELECT 1 FROM sluice_jobs j WHERE j.blocked_key = ?
  AND (j.priority < ? OR (j.priority = ? AND j.id < ?)) AND (j.queue = ? OR ` + engine.JobQueueNotPaused + `) LIMIT ?) c`,
		[]any{key, priority, priority, id, queue, limit}
}

// GetSemaphore reads one semaphore.
func (Dialect) GetSemaphore(key string) (string, []any) {
	return `SELECT ` + engine.SemaphoreColumns + ` FROM sluice_semaphores WHERE name = ?`, []any{key}
}

// SlotHolders lists the jobs holding a key's slots.
func (Dialect) SlotHolders(key string, limit int) (string, []any) {
	return `SELECT id FROM sluice_jobs WHERE conc_key = ? AND holds_slot = 1 ORDER BY id LIMIT ?`, []any{key, limit}
}
