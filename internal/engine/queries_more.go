package engine

// The statements of processes, queues, overrides, coalescing and
// recurring tasks.

// InsertProcess registers a process; it returns the id as a row where the
// database has RETURNING.
func (q *SQL) InsertProcess(p ProcessRow) (string, []any) {
	return q.insertProcess.bind(p.Kind, p.Name, p.Hostname, p.PID, p.Queues, p.StartedAt, p.HeartbeatAt)
}

// Heartbeat stamps a process's heartbeat.
func (q *SQL) Heartbeat(id, now int64) (string, []any) { return q.heartbeat.bind(now, id) }

// ProcessExists counts (0 or 1) the process's row.
func (q *SQL) ProcessExists(id int64) (string, []any) { return q.processExists.bind(id) }

// DeleteProcess removes a process.
func (q *SQL) DeleteProcess(id int64) (string, []any) { return q.deleteProcess.bind(id) }

// LockDeadProcesses selects and locks processes whose heartbeat is older
// than before, other than self (0: none). Columns: id.
func (q *SQL) LockDeadProcesses(before, self int64, limit int) (string, []any) {
	return q.lockDeadProcesses.bind(before, self, limit)
}

// DeleteProcesses removes the processes of ids that no running job is
// claimed under.
func (q *SQL) DeleteProcesses(ids []int64) (string, []any) { return q.deleteProcesses.bind(ids) }

// ListProcesses lists processes. Columns: ProcessColumns.
func (q *SQL) ListProcesses() string { return q.listProcesses }

// SetQueuePaused pauses or resumes a queue.
func (q *SQL) SetQueuePaused(queue string, paused bool, now int64) (string, []any) {
	return q.setQueuePaused.bind(queue, paused, now)
}

// ListQueues lists queues known from jobs and pauses. Columns: name,
// paused.
func (q *SQL) ListQueues() string { return q.listQueues }

// PausedQueues lists the queues paused now. Columns: name.
func (q *SQL) PausedQueues() string { return q.pausedQueues }

// SaveOverride sets a rate-limit override.
func (q *SQL) SaveOverride(o OverrideRow) (string, []any) {
	return q.saveOverride.bind(o.Target, o.To, o.PerUS, o.Burst, o.UpdatedAt)
}

// DeleteOverride removes one.
func (q *SQL) DeleteOverride(target string) (string, []any) { return q.deleteOverride.bind(target) }

// ListOverrides lists them. Columns: target, to_count, per_us, burst,
// updated_at.
func (q *SQL) ListOverrides() string { return q.listOverrides }

// InsertCoalescing inserts one job that takes a coalesce key unless a
// pending job holds it: it returns the new id as a row (none on a
// conflict) where the database has RETURNING, else it affects no row on a
// conflict.
func (q *SQL) InsertCoalescing(j InsertRow) (string, []any) {
	return q.insertCoalescing.bind(j.Kind, j.Queue, j.Priority, string(j.State), j.Args, j.MaxAttempts, j.CreatedAt, j.RunAt,
		j.RateKeys, j.ConcKey, j.ConcLimit, j.ConcDuration, j.ConcDiscard, j.HoldsSlot, j.CoalesceKey, j.FirstCallAt, j.Metadata,
		j.FairKey, j.FairStart)
}

// LockPending selects and locks the pending job that holds a coalesce
// key. Columns: JobInfoColumns, first_call_at.
func (q *SQL) LockPending(key string) (string, []any) { return q.lockPending.bind(key) }

// LockCoalesceKeys creates the rows of coalesce keys (sorted) that do not
// exist and locks them all, in key order.
func (q *SQL) LockCoalesceKeys(keys []string) (string, []any) {
	return q.lockCoalesceKeys.bind(columns{keys})
}

// ReadCoalesceKey reads the job a key's row points to, 0 for none.
// Columns: name, job_id.
func (q *SQL) ReadCoalesceKey(key string) (string, []any) { return q.readCoalesceKey.bind(key) }

// LockPendingByID locks the job id through the primary key if it still
// holds the coalesce key. Columns: JobInfoColumns, first_call_at.
func (q *SQL) LockPendingByID(id int64, key string) (string, []any) {
	return q.lockPendingByID.bind(id, key)
}

// PointCoalesceKeys points each key's row (key, sorted) to the job ids[i]
// created for it.
func (q *SQL) PointCoalesceKeys(keys []string, ids []int64) (string, []any) {
	return q.pointCoalesceKeys.bind(columns{keys, ids})
}

// LockIdleCoalesceKeys locks up to limit coalesce key rows after after,
// in key order, skipping those another transaction holds. Columns: name.
func (q *SQL) LockIdleCoalesceKeys(after string, limit int) (string, []any) {
	return q.lockIdleCoalesceKeys.bind(after, limit)
}

// ReleasedCoalesceKeys selects, of the key rows names, those whose job no
// longer holds the key, without a lock. Columns: name.
func (q *SQL) ReleasedCoalesceKeys(names []string) (string, []any) {
	return q.releasedCoalesceKeys.bind(names)
}

// DeleteCoalesceKeys deletes key rows by name.
func (q *SQL) DeleteCoalesceKeys(names []string) (string, []any) {
	return q.deleteCoalesceKeys.bind(names)
}

// UpdateCoalesced applies a joining call to the pending job.
func (q *SQL) UpdateCoalesced(u CoalesceUpdate) (string, []any) {
	return q.updateCoalesced.bind(u.ID, u.Args, u.Calls, string(u.State), u.RunAt, u.ReleaseKey)
}

// InsertCall stores one collected call.
func (q *SQL) InsertCall(jobID int64, seq int, args string, now int64) (string, []any) {
	return q.insertCall.bind(jobID, seq, args, now)
}

// LoadCalls reads the collected calls of jobs. Columns: job_id, args, in
// job then call order.
func (q *SQL) LoadCalls(jobIDs []int64) (string, []any) { return q.loadCalls.bind(jobIDs) }

// DeleteCalls deletes the collected calls of jobs.
func (q *SQL) DeleteCalls(jobIDs []int64) (string, []any) { return q.deleteCalls.bind(jobIDs) }

// InsertTick records a recurring task's tick unless it is recorded; it
// affects no row when it is.
func (q *SQL) InsertTick(task string, runAt, now int64) (string, []any) {
	return q.insertTick.bind(task, runAt, now)
}

// SetTickJob records the job a tick enqueued.
func (q *SQL) SetTickJob(task string, runAt, jobID int64) (string, []any) {
	return q.setTickJob.bind(jobID, task, runAt)
}

// LastTicks lists each task's latest recorded tick. Columns: task, run_at,
// ran_at, job_id.
func (q *SQL) LastTicks() string { return q.lastTicks }

// OldTicks reads up to limit records of ticks before before, but each
// task's latest. Columns: task, run_at.
func (q *SQL) OldTicks(before int64, limit int) (string, []any) {
	return q.oldTicks.bind(before, limit)
}

// DeleteTick deletes one tick record.
func (q *SQL) DeleteTick(task string, runAt int64) (string, []any) {
	return q.deleteTick.bind(task, runAt)
}
