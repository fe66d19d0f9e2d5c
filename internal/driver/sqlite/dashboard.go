package sqlite

import (
	"github.com/sluicequeue/sluice/internal/engine"
)

// The dashboard's and Explain's SQL (engine.DashboardDialect). A job
// state is written into the text as a literal, from the fixed set of
// states, so that the planner matches the state's partial index.

var _ engine.DashboardDialect = Dialect{}

// FinishedSince counts recently finished jobs per queue, state and
// bucket, through the finished and failed indexes.
func (Dialect) FinishedSince(since, bucket int64) (string, []any) {
	return `SELECT queue, state, finished_at / ?2, count(*) FROM sluice_jobs
WHERE state IN ('completed', 'cancelled') AND finished_at >= ?1 GROUP BY 1, 2, 3
UNION ALL SELECT queue, state, finished_at / ?2, count(*) FROM sluice_jobs
WHERE state = 'failed' AND finished_at >= ?1 GROUP BY 1, 2, 3`, []any{since, bucket}
}

// AdmittedSince lists the rate keys and claim times of recently claimed
// jobs that are running or finished, read through the finished, failed
// and running indexes; with a key, those that carry it (a line of
// rate_keys is the key, or the key, a tab and its cost).
func (Dialect) AdmittedSince(key string, since int64, limit int) (string, []any) {
	if key == "" {
		return engine.AdmittedOf(admittedScan, ""), []any{since, limit}
	}
	return engine.AdmittedOf(admittedScan, `instr(char(10) || rate_keys || char(10), char(10) || ?3 || char(10)) > 0
  OR instr(char(10) || rate_keys, char(10) || ?3 || char(9)) > 0`), []any{since, limit, key}
}

// admittedScan reads the rate keys and claim times of up to ?2 jobs
// claimed at or after ?1 that are running or finished.
const admittedScan = `SELECT rate_keys, attempted_at FROM sluice_jobs
WHERE state IN ('completed', 'cancelled') AND finished_at >= ?1 AND attempted_at >= ?1 AND rate_keys IS NOT NULL
UNION ALL SELECT rate_keys, attempted_at FROM sluice_jobs
WHERE state = 'failed' AND finished_at >= ?1 AND attempted_at >= ?1 AND rate_keys IS NOT NULL
UNION ALL SELECT rate_keys, attempted_at FROM sluice_jobs
WHERE state = 'running' AND attempted_at >= ?1 AND rate_keys IS NOT NULL
LIMIT ?2`

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
// the three ready indexes (fair jobs counted by id too: an estimate).
func (Dialect) ReadyAhead(queue string, priority int, id int64, limit int) (string, []any) {
	return `SELECT (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs WHERE state = 'ready' AND rate_keys IS NULL AND fair_key IS NULL AND queue = ?1
    AND (priority < ?2 OR (priority = ?2 AND id < ?3)) LIMIT ?4))
  + (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs WHERE state = 'ready' AND rate_keys IS NOT NULL AND fair_key IS NULL AND queue = ?1
    AND (priority < ?2 OR (priority = ?2 AND id < ?3)) LIMIT ?4))
  + (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs WHERE state = 'ready' AND fair_key IS NOT NULL AND queue = ?1
    AND (priority < ?2 OR (priority = ?2 AND id < ?3)) LIMIT ?4))`, []any{queue, priority, id, limit}
}

// ParkedAhead counts the jobs parked on a budget that get slots before
// the job (priority, id), in the two parked indexes: the budget's jobs
// without a fairness key before (priority, id), and its fair jobs before
// the job's (priority, fair_start, id) when it is fair, else before
// (priority, id); of the job's own queue and of queues not paused, as
// LockParked passes another paused queue's jobs over. (Unparking merges
// the two streams at their heads: an estimate, as ReadyAhead's.)
func (Dialect) ParkedAhead(key, queue string, priority int, id int64, limit int) (string, []any) {
	return `SELECT (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs j WHERE j.state = 'parked' AND j.fair_key IS NULL AND j.wait_key = ?1
    AND (j.priority < ?2 OR (j.priority = ?2 AND j.id < ?3)) AND (j.queue = ?5 OR ` + engine.JobQueueNotPaused + `) LIMIT ?4))
  + (SELECT count(*) FROM (SELECT 1 FROM sluice_jobs j JOIN sluice_jobs me ON me.id = ?3
    WHERE j.state = 'parked' AND j.fair_key IS NOT NULL AND j.wait_key = ?1 AND j.priority <= ?2
    AND (j.priority < ?2 OR CASE WHEN me.fair_key IS NULL THEN j.id < ?3
      ELSE j.fair_start < me.fair_start OR (j.fair_start = me.fair_start AND j.id < ?3) END)
    AND (j.queue = ?5 OR ` + engine.JobQueueNotPaused + `) LIMIT ?4))`,
		[]any{key, priority, id, limit, queue}
}

// SlotsAhead counts the jobs holding a budget's slots before (run_at,
// id).
func (Dialect) SlotsAhead(key string, runAt, id int64, limit int) (string, []any) {
	return `SELECT count(*) FROM (SELECT 1 FROM sluice_jobs WHERE wait_key = ?1 AND state = 'scheduled'
  AND (run_at < ?2 OR (run_at = ?2 AND id < ?3)) LIMIT ?4)`, []any{key, runAt, id, limit}
}

// BlockedAhead counts the jobs blocked on a key before (priority, id), of
// the job's own queue and of queues not paused, as LockBlocked passes
// another paused queue's jobs over.
func (Dialect) BlockedAhead(key, queue string, priority int, id int64, limit int) (string, []any) {
	return `SELECT count(*) FROM (SELECT 1 FROM sluice_jobs j WHERE j.state = 'blocked' AND j.conc_key = ?1
  AND (j.priority < ?2 OR (j.priority = ?2 AND j.id < ?3)) AND (j.queue = ?5 OR ` + engine.JobQueueNotPaused + `) LIMIT ?4)`,
		[]any{key, priority, id, limit, queue}
}

// GetSemaphore reads one semaphore.
func (Dialect) GetSemaphore(key string) (string, []any) {
	return `SELECT ` + engine.SemaphoreColumns + ` FROM sluice_semaphores WHERE name = ?`, []any{key}
}

// SlotHolders lists the jobs holding a key's slots.
func (Dialect) SlotHolders(key string, limit int) (string, []any) {
	return `SELECT id FROM sluice_jobs WHERE conc_key = ? AND holds_slot = 1 ORDER BY id LIMIT ?`, []any{key, limit}
}
