package engine

import "slices"

// The statements of jobs: enqueue, claim, finish, promotion, recovery,
// cleanup and inspection.

// InsertJobs inserts jobs, returning their ids as rows when the database
// has RETURNING; it also wakes listeners for ready jobs where the
// database has WakeOnInsert.
func (q *SQL) InsertJobs(jobs []InsertRow) (string, []any) {
	n := len(jobs)
	kinds, queues, states, args := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	rateKeys, concKeys, lastErrs, metadata := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	prios, maxAttempts, concLimits := make([]int32, n), make([]int32, n), make([]int32, n)
	created, runAt, concDur, finished := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	discard, holds := make([]bool, n), make([]bool, n)
	fairKeys, fairStarts := make([]string, n), make([]int64, n)
	for i, j := range jobs {
		fairKeys[i], fairStarts[i] = j.FairKey, j.FairStart
		kinds[i], queues[i], states[i], args[i] = j.Kind, j.Queue, string(j.State), j.Args
		rateKeys[i], concKeys[i], lastErrs[i], metadata[i] = j.RateKeys, j.ConcKey, LastErrorText(j.LastError, ""), j.Metadata
		prios[i], maxAttempts[i], concLimits[i] = int32(j.Priority), int32(j.MaxAttempts), int32(j.ConcLimit)
		created[i], runAt[i], concDur[i], finished[i] = j.CreatedAt, j.RunAt, j.ConcDuration, j.FinishedAt
		discard[i], holds[i] = j.ConcDiscard, j.HoldsSlot
	}
	return q.insertJobs.bind(columns{kinds, queues, prios, states, args, maxAttempts, created, runAt, rateKeys,
		concKeys, concLimits, concDur, discard, holds, lastErrs, finished, metadata, fairKeys, fairStarts})
}

// LockReady selects (and locks, skipping locked rows) up to limit ready
// jobs of one queue, by priority then id, unless the queue is paused:
// those that carry no rate-limit key, or, with limited, those that do.
// Columns: JobColumns.
func (q *SQL) LockReady(queue string, limited bool, limit int) (string, []any) {
	if limited {
		return q.lockReadyLimited.bind(queue, limit)
	}
	return q.lockReadyPlain.bind(queue, limit)
}

// LockReadyLike selects and locks, skipping locked rows, up to limit
// ready jobs of a queue and kind whose rate keys are exactly rateKeys and
// that hold no concurrency slot, by priority then id; none while the
// queue is paused. Columns: id, priority.
func (q *SQL) LockReadyLike(queue, kind, rateKeys string, limit int) (string, []any) {
	return q.lockReadyLike.bind(queue, rateKeys, kind, limit)
}

// LockReadyLimitedAt selects and locks, skipping locked rows, up to limit
// ready rate-limited jobs of one queue at one priority whose ids lie
// strictly between after and before, by id. Columns: JobColumns.
func (q *SQL) LockReadyLimitedAt(queue string, priority int, after, before int64, limit int) (string, []any) {
	return q.lockReadyLimitedAt.bind(queue, int32(priority), after, before, limit)
}

// LockReadyLimitedBefore selects and locks, skipping locked rows, up to
// limit ready rate-limited jobs of one queue more urgent than priority (a
// lower number), by priority then id. Columns: JobColumns.
func (q *SQL) LockReadyLimitedBefore(queue string, priority, limit int) (string, []any) {
	return q.lockReadyLimitedBefore.bind(queue, int32(priority), limit)
}

// LockReadyLimitedAfter selects and locks, skipping locked rows, up to
// limit ready rate-limited jobs of one queue less urgent than priority, by
// priority then id. Columns: JobColumns.
func (q *SQL) LockReadyLimitedAfter(queue string, priority, limit int) (string, []any) {
	return q.lockReadyLimitedAfter.bind(queue, int32(priority), limit)
}

// FirstReadyLike and LastReadyLike select the first and the last, by
// priority then id, of the ready jobs LockReadyLike would take at any
// priority (none while the queue is paused). Columns: id, priority.
func (q *SQL) FirstReadyLike(queue, kind, rateKeys string) (string, []any) {
	return q.firstReadyLike.bind(queue, rateKeys, kind)
}

// LastReadyLike: see FirstReadyLike.
func (q *SQL) LastReadyLike(queue, kind, rateKeys string) (string, []any) {
	return q.lastReadyLike.bind(queue, rateKeys, kind)
}

// MarkRunning claims locked jobs for a process.
func (q *SQL) MarkRunning(ids []int64, processID, now int64) (string, []any) {
	return q.markRunning.bind(processID, now, ids)
}

// CompleteJobs marks completed the jobs that still run for a process
// under claim (the job's claims as its run was claimed): the runs it made
// under that claim.
func (q *SQL) CompleteJobs(ids []int64, processID, claim, now int64) (string, []any) {
	return q.completeJobs.bind(now, ids, processID, claim, string(StateRunning))
}

// DeleteJobs deletes the jobs that still run for a process under claim
// (a completion that keeps nothing).
func (q *SQL) DeleteJobs(ids []int64, processID, claim int64) (string, []any) {
	return q.deleteJobs.bind(ids, processID, claim, string(StateRunning))
}

// SetJobs applies transitions to jobs currently in state from (and, when
// processID is not 0, claimed by that process): the dialect's bulk
// update. It is the one statement that moves a job with a last error, so
// the one place each is made as a job keeps it (LastErrorText): only a
// give-back's record reads as one.
func (q *SQL) SetJobs(from State, processID, now int64, rows []SetRow) (string, []any) {
	return q.d.SetJobs(from, processID, now, lastErrors(rows))
}

// setJobRuns is SetJobs for any number of rows: a statement for each
// MaxInsertBatch of them (one, with the same text as SetJobs, for fewer).
// SetJobs binds ten values a row on SQLite and MySQL, and SQLite binds at
// most 32,766 in one statement: a promotion that blocked 3,277 jobs, a
// claim that deferred as many or a finish that moved as many failed there
// as one. Every bulk update of jobs whose rows come from a batch (a claim,
// a finish, a promotion) goes through it.
func (q *SQL) setJobRuns(from State, processID, now int64, rows []SetRow) []Stmt {
	var out []Stmt
	for run := range slices.Chunk(rows, q.c.MaxInsertBatch) {
		out = append(out, stmt(q.SetJobs(from, processID, now, run)))
	}
	return out
}

// LockDue selects and locks up to limit scheduled jobs due at now, but
// those of a paused queue that need a concurrency slot. Columns: id,
// queue, kind, conc_key, conc_limit, conc_duration, conc_discard,
// holds_slot, attempted_at, deferrals.
func (q *SQL) LockDue(now int64, limit int) (string, []any) { return q.lockDue.bind(now, limit) }

// LockDueWaiting selects and locks, skipping locked rows, up to limit
// scheduled jobs of the queues that wait on a rate limit and are due at
// now, soonest first. Columns: JobColumns, conc_limit, conc_duration,
// conc_discard, attempted_at.
func (q *SQL) LockDueWaiting(queues []string, now int64, limit int) (string, []any) {
	return q.lockDueWaiting.bind(now, queues, limit)
}

// LockDueBeyond is LockDue but for the jobs that would take a slot of
// one of keys: a promotion that left those keys' due jobs (their
// semaphores held by another transaction) takes the jobs due after them.
func (q *SQL) LockDueBeyond(now int64, keys []string, limit int) (string, []any) {
	return q.lockDueBeyond.bind(now, keys, limit)
}

// LockDueWaitingBeyond is LockDueWaiting but for the jobs that would take
// a slot of one of keys, as LockDueBeyond.
func (q *SQL) LockDueWaitingBeyond(queues []string, now int64, keys []string, limit int) (string, []any) {
	return q.lockDueWaitingBeyond.bind(now, queues, keys, limit)
}

// MarkReady makes locked jobs ready.
func (q *SQL) MarkReady(ids []int64) (string, []any) {
	return q.markReady.bind(ids, string(StateScheduled))
}

// Notify wakes listening workers for the queues, or returns "" where the
// database has no notifications.
func (q *SQL) Notify(queues []string) (string, []any) {
	if q.notify == nil {
		return "", nil
	}
	return q.notify.bind(queues)
}

// Notifies reports whether the database wakes listeners (Notify): if
// not, workers in other processes poll.
func (q *SQL) Notifies() bool { return q.notify != nil }

// LockOrphans selects and locks running jobs whose process is listed (the
// list may be empty), or gone and claimed before lostBefore (µs).
// Columns: id, queue, attempt, max_attempts, conc_key, holds_slot,
// conc_limit, conc_duration.
func (q *SQL) LockOrphans(processIDs []int64, lostBefore int64, limit int) (string, []any) {
	if processIDs == nil {
		processIDs = []int64{}
	}
	return q.lockOrphans.bind(processIDs, lostBefore, limit)
}

// LockRunningOf selects and locks up to limit of the jobs running for one
// process, skipping locked rows. Columns: id, attempt.
func (q *SQL) LockRunningOf(processID int64, limit int) (string, []any) {
	return q.lockRunningOf.bind(processID, limit)
}

// LockRuns selects and locks, of the listed jobs, those running for
// processID, under whatever claim. Columns: id, claims, queue, holds_slot,
// conc_key, conc_limit, conc_duration.
func (q *SQL) LockRuns(ids []int64, processID int64) (string, []any) {
	return q.lockRuns.bind(ids, string(StateRunning), processID)
}

// LockFinished selects, skipping locked rows, up to limit completed or
// cancelled jobs that finished before the given time. Columns: id, calls.
func (q *SQL) LockFinished(before int64, limit int) (string, []any) {
	return q.lockFinished.bind(before, limit)
}

// DeleteJobsByID deletes jobs.
func (q *SQL) DeleteJobsByID(ids []int64) (string, []any) { return q.deleteJobsByID.bind(ids) }

// GetJob reads one job. Columns: JobInfoColumns.
func (q *SQL) GetJob(id int64) (string, []any) { return q.getJob.bind(id) }

// LockJob reads and locks one job. Columns: JobInfoColumns.
func (q *SQL) LockJob(id int64) (string, []any) { return q.lockJob.bind(id) }

// ListJobs lists jobs, newest first, filtered by whichever of state, kind
// and queue are set. Columns: JobInfoColumns.
func (q *SQL) ListJobs(f JobFilter) (string, []any) {
	return q.listJobs.bind(string(f.State), f.Kind, f.Queue, f.Before, f.Limit)
}

// JobsByState counts jobs per queue and state. Columns: queue, state,
// count.
func (q *SQL) JobsByState() string { return q.jobsByState }

// UnfinishedByState counts the jobs that are not completed or cancelled,
// per queue and state. Columns: queue, state, count.
func (q *SQL) UnfinishedByState() string { return q.unfinishedByState }

// OldestWaiting finds, per queue, the oldest job waiting to run, split by
// whether a limit holds it. Columns: queue, throttled (0 or 1), and when
// it began to wait (µs).
func (q *SQL) OldestWaiting() string { return q.oldestWaiting }

// RecordAttempts keeps the error of the run that just failed for each of
// ids (their attempt and last_error, as SetJobs left them): list only the
// jobs whose failed run the transaction moved.
func (q *SQL) RecordAttempts(ids []int64, now int64) (string, []any) {
	return q.recordAttempts.bind(now, ids)
}

// LoadAttempts reads a job's failed runs, oldest first. Columns:
// attempt, error, failed_at.
func (q *SQL) LoadAttempts(jobID int64) (string, []any) { return q.loadAttempts.bind(jobID) }

// DeleteAttempts deletes the failed runs kept for jobs.
func (q *SQL) DeleteAttempts(jobIDs []int64) (string, []any) { return q.deleteAttempts.bind(jobIDs) }
