package engine

// The statements of rate-limit budgets and concurrency semaphores.

import "strings"

// LockBudgets selects and locks budget rows in key order. Columns:
// BudgetColumns.
func (q *SQL) LockBudgets(keys []string) (string, []any) { return q.lockBudgets.bind(keys) }

// LockFreeBudgets selects and locks, skipping the rows another transaction
// holds, budget rows in key order. Columns: BudgetColumns.
func (q *SQL) LockFreeBudgets(keys []string) (string, []any) { return q.lockFreeBudgets.bind(keys) }

// ReadBudgets selects budget rows in key order without locking them.
// Columns: as LockBudgets.
func (q *SQL) ReadBudgets(keys []string) (string, []any) { return q.readBudgets.bind(keys) }

// GetBudget reads one budget without locking it. Columns: BudgetColumns.
func (q *SQL) GetBudget(key string) (string, []any) { return q.getBudget.bind(key) }

// InsertBudgets inserts empty budget rows for keys, ignoring those that
// exist.
func (q *SQL) InsertBudgets(keys []string) (string, []any) {
	return q.insertBudgets.bind(columns{keys})
}

// SaveBudgets writes budget rows back.
func (q *SQL) SaveBudgets(rows []BudgetRow) (string, []any) {
	n := len(rows)
	names := make([]string, n)
	tat, next, interval, updated := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	burst, parked, slotted := make([]int32, n), make([]int32, n), make([]int32, n)
	for i, r := range rows {
		names[i], tat[i], next[i], interval[i], updated[i] = r.Name, r.TAT, r.NextSlot, r.IntervalNS, r.UpdatedAt
		burst[i], parked[i], slotted[i] = int32(r.Burst), int32(r.Parked), int32(r.SlottedPriority)
	}
	return q.saveBudgets.bind(columns{names, tat, next, interval, burst, parked, updated, slotted})
}

// MoveCursor sets a budget's next slot to to, adds parked to its parked
// count and sets its least urgent slotted priority, if its next slot and
// its limit are still those of read (the row as the caller read it); it
// affects no row otherwise.
func (q *SQL) MoveCursor(read BudgetRow, to int64, parked, slottedPriority int) (string, []any) {
	return q.moveCursor.bind(to, parked, int32(slottedPriority), read.Name, read.NextSlot, read.IntervalNS, read.Burst)
}

// LockParkedBudgets selects and locks, skipping locked rows, budgets with
// parked jobs whose next slot falls before until, soonest first. Columns:
// BudgetColumns.
func (q *SQL) LockParkedBudgets(until int64, limit int) (string, []any) {
	return q.lockParkedBudgets.bind(until, limit)
}

// ReadRepriced selects, without locking them, the names of up to limit
// budgets after after, in key order, that have parked jobs and whose
// stored limit (interval, and burst: 0 for a paused limit) is not the
// given one: those of a scope (target without "/": the bare scope and
// SCOPE/…), or the one budget target names. Columns: name.
func (q *SQL) ReadRepriced(target, after string, interval int64, burst, limit int) (string, []any) {
	prefix, past := "", ""
	if !strings.Contains(target, "/") {
		prefix, past = scopeRange(target)
	}
	return q.readRepriced.bind(target, prefix, past, after, interval, int32(burst), limit)
}

// scopeRange returns the range of the keys SCOPE/… of a scope: they sort,
// byte by byte, from "SCOPE/" up to "SCOPE0" ('0' follows '/').
func scopeRange(scope string) (prefix, past string) { return scope + "/", scope + "0" }

// LockParked selects and locks, skipping locked rows, up to limit parked
// jobs of a budget from each stream: those without a fairness key by
// priority then id, and fair ones by priority, virtual start, then id
// (mergeParked merges them). Columns: id, rate_keys, priority, fair_start,
// fair (1 for a fair job, else 0).
func (q *SQL) LockParked(key string, limit int) (string, []any) {
	return q.lockParked.bind(key, limit)
}

// LockSlotted selects and locks, skipping locked rows, up to limit jobs
// scheduled on a budget's slots at from (µs) or later that are less urgent
// than priority and hold no concurrency slot, earliest slot first.
// Columns: id, kind, run_at, priority, rate_keys.
func (q *SQL) LockSlotted(key string, from int64, priority, limit int) (string, []any) {
	return q.lockSlotted.bind(key, from, int32(priority), limit)
}

// CountParked counts a budget's parked jobs, whether or not another
// transaction holds them locked. Columns: count.
func (q *SQL) CountParked(key string) (string, []any) { return q.countParked.bind(key) }

// UncountParked lowers a budget's count of parked jobs by one, not below
// 0: for a parked job an operator moved away.
func (q *SQL) UncountParked(key string) (string, []any) { return q.uncountParked.bind(key) }

// LockIdleBudgets selects and locks, skipping locked rows, up to limit
// budgets that may be idle at now. Columns: BudgetColumns.
func (q *SQL) LockIdleBudgets(now int64, limit int) (string, []any) {
	return q.lockIdleBudgets.bind(now, limit)
}

// DeleteBudgets deletes budgets by name.
func (q *SQL) DeleteBudgets(names []string) (string, []any) { return q.deleteBudgets.bind(names) }

// PageBudgets lists up to limit budgets whose names sort after after, by
// name, with how many jobs wait on each. Columns: BudgetColumns, waiting.
func (q *SQL) PageBudgets(after string, limit int) (string, []any) {
	return q.pageBudgets.bind(after, limit)
}

// GetBudgetWaiting reads one budget by its key, with how many jobs wait
// on it. Columns: BudgetColumns, waiting.
func (q *SQL) GetBudgetWaiting(key string) (string, []any) { return q.getBudgetWaiting.bind(key) }

// CountBudgets counts the budgets, up to limit. Columns: count.
func (q *SQL) CountBudgets(limit int) (string, []any) { return q.countBudgets.bind(limit) }

// LockSemaphores selects and locks semaphores in key order. Columns:
// SemaphoreColumns.
func (q *SQL) LockSemaphores(keys []string) (string, []any) { return q.lockSemaphores.bind(keys) }

// LockFreeSemaphores selects and locks, in key order, the semaphores of
// keys that no other transaction holds, skipping the others. Columns:
// SemaphoreColumns.
func (q *SQL) LockFreeSemaphores(keys []string) (string, []any) {
	return q.lockFreeSemaphores.bind(keys)
}

// ExistingSemaphores selects which of keys have a row, without locking
// them. Columns: name.
func (q *SQL) ExistingSemaphores(keys []string) (string, []any) {
	return q.existingSemaphores.bind(keys)
}

// ProbeSemaphores locks the semaphores of keys without waiting, failing
// when another transaction holds one or is inserting one; empty where the
// database has no such read (ShortLockWait bounds the insert instead).
// Columns: name.
func (q *SQL) ProbeSemaphores(keys []string) (string, []any) {
	if q.probeSemaphores == nil {
		return "", nil
	}
	return q.probeSemaphores.bind(keys)
}

// ShortLockWait bounds the lock waits of the rest of a transaction (or of
// the savepoint it is set in) to a moment, keeping the bound it had; ""
// where the database has no such setting. RestoreLockWait undoes it.
func (q *SQL) ShortLockWait() string { return q.shortLockWait }

// RestoreLockWait sets the lock waits of a transaction back to the bound
// it had before ShortLockWait (the connection's, or its own SET LOCAL),
// not to the database's default. A savepoint rolled back after
// ShortLockWait needs none: the rollback undoes the setting.
func (q *SQL) RestoreLockWait() string { return q.restoreLockWait }

// InsertSemaphores inserts unused semaphore rows for keys, ignoring those
// that exist.
func (q *SQL) InsertSemaphores(keys []string) (string, []any) {
	return q.insertSemaphores.bind(columns{keys})
}

// SaveSemaphores writes semaphores back.
func (q *SQL) SaveSemaphores(rows []SemaphoreRow) (string, []any) {
	n := len(rows)
	names := make([]string, n)
	held, limit := make([]int32, n), make([]int32, n)
	dur, exp, upd := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, r := range rows {
		names[i], held[i], limit[i], dur[i], exp[i], upd[i] = r.Name, int32(r.Held), int32(r.Limit), r.DurationUS, r.ExpiresAt, r.UpdatedAt
	}
	return q.saveSemaphores.bind(columns{names, held, limit, dur, exp, upd})
}

// LockBlocked selects and locks, skipping locked rows, up to limit of the
// first blocked jobs of a key by priority then id (stream 0), and up to
// limit of its first blocked fair jobs by priority, virtual start then id
// (stream 1). Columns: id, queue, priority, fair (1 for a fair job, else
// 0), stream.
func (q *SQL) LockBlocked(key string, limit int) (string, []any) {
	return q.lockBlocked.bind(key, limit)
}

// MarkSlots records whether jobs hold a slot.
func (q *SQL) MarkSlots(ids []int64, holds bool) (string, []any) {
	return q.markSlots.bind(holds, ids)
}

// LockRunningHolders selects and locks, skipping locked rows, the running
// jobs of keys that hold a slot. Columns: id, conc_key, attempted_at.
func (q *SQL) LockRunningHolders(keys []string) (string, []any) {
	return q.lockRunningHolders.bind(keys)
}

// ExpiredSemaphores selects, without locking them, the keys of
// semaphores with taken slots that expired before now. Columns: name.
func (q *SQL) ExpiredSemaphores(now int64, limit int) (string, []any) {
	return q.expiredSemaphores.bind(now, limit)
}

// BlockedLimit selects the limit the first blocked job of key, of a
// queue not paused, was enqueued under. Columns: conc_limit,
// conc_duration (microseconds).
func (q *SQL) BlockedLimit(key string) (string, []any) { return q.blockedLimit.bind(key) }

// BlockedKeys selects keys with blocked jobs whose semaphore has a free
// slot, no row, or no limit declared. Columns: conc_key.
func (q *SQL) BlockedKeys(limit int) (string, []any) { return q.blockedKeys.bind(limit) }

// LockIdleSemaphores selects and locks, skipping locked rows, up to limit
// semaphores after the key after, in key order, with no slot held and
// no activity since before. Columns: name.
func (q *SQL) LockIdleSemaphores(after string, before int64, limit int) (string, []any) {
	return q.lockIdleSemaphores.bind(after, before, limit)
}

// ReadUndeclaredSemaphores selects, without locking them, the names of up
// to limit semaphores of a concurrency scope (the bare scope and
// SCOPE/…) after after, in the primary key's order, whose limit is not to
// and duration (µs). Columns: name.
func (q *SQL) ReadUndeclaredSemaphores(scope, after string, to int, duration int64, limit int) (string, []any) {
	prefix, past := scopeRange(scope)
	return q.readUndeclaredSemaphores.bind(scope, prefix, past, after, int32(to), duration, limit)
}

// BlockedAmong selects which of keys have a blocked job. Columns: key.
func (q *SQL) BlockedAmong(keys []string) (string, []any) { return q.blockedAmong.bind(keys) }

// DeleteSemaphores deletes semaphores by name, if they hold no slot.
func (q *SQL) DeleteSemaphores(names []string) (string, []any) { return q.deleteSemaphores.bind(names) }

// PageSemaphores lists up to limit semaphores whose names sort after
// after, by name, with their blocked and holding jobs. Columns:
// SemaphoreColumns, blocked, holding.
func (q *SQL) PageSemaphores(after string, limit int) (string, []any) {
	return q.pageSemaphores.bind(after, limit)
}

// CountSemaphores counts the semaphores, up to limit. Columns: count.
func (q *SQL) CountSemaphores(limit int) (string, []any) { return q.countSemaphores.bind(limit) }
