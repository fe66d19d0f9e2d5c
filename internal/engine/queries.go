package engine

import (
	"fmt"
	"slices"
	"strings"
)

// SQL is the statement catalog rendered for one database: a method per
// statement that returns its text and arguments. Times are microseconds
// since the Unix epoch; lists are never empty unless said.
type SQL struct {
	d Dialect
	c Capabilities
	// states are the rendered stateJobs.
	states map[State]string

	createMigrationsTable, lockMigrations, unlockMigrations, appliedMigrations, genericPlans string
	recordMigration, forgetMigration                                                         *sqlStatement
	releaseMigrationLock, createMigrationProgressTable, migrationProgress                    string
	takeMigrationLock, saveMigrationProgress, clearMigrationProgress                         *sqlStatement
	coalesceKeysHeldTwice                                                                    *sqlStatement

	insertJobs, lockReadyPlain, lockReadyLimited, lockReadyLike, markRunning, completeJobs, deleteJobs   *sqlStatement
	lockReadyLimitedAt, lockReadyLimitedBefore, lockReadyLimitedAfter, firstReadyLike, lastReadyLike     *sqlStatement
	lockDue, lockDueWaiting, markReady, notify, lockOrphans, lockRunningOf, lockFinished, deleteJobsByID *sqlStatement
	lockDueBeyond, lockDueWaitingBeyond                                                                  *sqlStatement
	getJob, lockJob, listJobs, lockRuns                                                                  *sqlStatement
	recordAttempts, loadAttempts, deleteAttempts                                                         *sqlStatement
	jobsByState, unfinishedByState, oldestWaiting                                                        string
	savepoint, rollbackToSavepoint, releaseSavepoint                                                     string

	insertProcess, heartbeat, processExists, deleteProcess, lockDeadProcesses, deleteProcesses *sqlStatement
	listProcesses                                                                              string

	setQueuePaused, saveOverride, deleteOverride *sqlStatement
	listQueues, listOverrides, pausedQueues      string

	lockBudgets, lockFreeBudgets, readBudgets, getBudget, insertBudgets, saveBudgets, moveCursor, lockParkedBudgets *sqlStatement
	lockParked, lockSlotted, countParked, uncountParked, lockIdleBudgets, deleteBudgets, readRepriced               *sqlStatement
	pageBudgets, getBudgetWaiting, countBudgets                                                                     *sqlStatement

	lockSemaphores, lockFreeSemaphores, insertSemaphores, saveSemaphores, lockBlocked, markSlots, lockRunningHolders *sqlStatement
	expiredSemaphores, blockedKeys, lockIdleSemaphores, blockedAmong, deleteSemaphores, blockedLimit                 *sqlStatement
	existingSemaphores, probeSemaphores, readUndeclaredSemaphores, pageSemaphores, countSemaphores                   *sqlStatement
	shortLockWait, restoreLockWait                                                                                   string

	insertCoalescing, lockPending, updateCoalesced, insertCall, loadCalls, deleteCalls                                *sqlStatement
	lockCoalesceKeys, readCoalesceKey, lockPendingByID, pointCoalesceKeys, lockIdleCoalesceKeys, releasedCoalesceKeys *sqlStatement
	deleteCoalesceKeys                                                                                                *sqlStatement

	insertTick, setTickJob, oldTicks, deleteTick *sqlStatement

	lockReadyFair, insertFairKeys, lockFairKeys, fairVirtualTime, saveFairKeys, refundFairKeys *sqlStatement
	fairPruneBound, lockFairAnchor, lockPrunableFairKeys, readPrunableFairKeys, deleteFairKeys *sqlStatement
	fairLevels                                                                                 string
	lastTicks                                                                                  string
}

// optional are the statements a database may lack (have no default, or
// replace with an empty one): without Notify and WakeOnInsert workers in
// other processes poll; without LockMigrations and UnlockMigrations
// migrators rely on their run's transaction alone (SQLite's BEGIN
// IMMEDIATE); without GenericPlans a
// claim around a sweep plans its statements as the database chooses.
// ProbeSemaphores (a locking read that fails at once on a row another
// transaction holds or is inserting: MySQL's) or else ShortLockWait and
// RestoreLockWait (a bound on lock waits in a transaction: PostgreSQL's)
// let a promotion make its keys' missing semaphore rows without waiting
// for a transaction that is making one too; a database with row locks
// and neither waits for it (lockDueSlots).
// Only a database whose DDL commits at once (MySQL) has the session's
// migration lock and the migration progress (see migrationStatements).
var optional = map[string]bool{"Notify": true, "WakeOnInsert": true, "LockMigrations": true, "UnlockMigrations": true, "GenericPlans": true,
	"ProbeSemaphores": true, "ShortLockWait": true, "RestoreLockWait": true,
	"TakeMigrationLock": true, "ReleaseMigrationLock": true,
	"CreateMigrationProgressTable": true, "MigrationProgress": true, "SaveMigrationProgress": true, "ClearMigrationProgress": true}

// wakes are the inserts that wake listeners for the jobs they make ready,
// where the database has WakeOnInsert.
var wakes = map[string]bool{"InsertJobs": true, "InsertCoalescing": true}

// NewSQL renders the catalog for d.
func NewSQL(d Dialect) (*SQL, error) {
	c := d.Capabilities()
	if c.MaxInsertBatch < 1 {
		// Every statement of many rows or keys is split by it.
		return nil, fmt.Errorf("dialect %s: MaxInsertBatch is %d; it must be at least 1", d.Name(), c.MaxInsertBatch)
	}
	all, err := loadCatalog(d.Replacements())
	if err != nil {
		return nil, err
	}
	q := &SQL{d: d, c: c}
	render := func(name string) (string, error) {
		e, ok := all[name]
		if !ok || e.fragment {
			if optional[name] {
				return "", nil
			}
			return "", fmt.Errorf("no statement %s", name)
		}
		if e.text == "" {
			if optional[name] {
				return "", nil
			}
			return "", fmt.Errorf("statement %s is empty", name)
		}
		text, err := expand(all, name, e.text)
		if err != nil {
			return "", err
		}
		text = spell(text, c)
		if w := all["WakeOnInsert"]; wakes[name] && w.text != "" && c.Returning {
			text = strings.Replace(w.text, "{insert}", text, 1)
		}
		return text, nil
	}
	texts := []struct {
		dst  *string
		name string
	}{
		{&q.createMigrationsTable, "CreateMigrationsTable"}, {&q.lockMigrations, "LockMigrations"},
		{&q.unlockMigrations, "UnlockMigrations"}, {&q.appliedMigrations, "AppliedMigrations"}, {&q.genericPlans, "GenericPlans"},
		{&q.jobsByState, "JobsByState"}, {&q.unfinishedByState, "UnfinishedByState"}, {&q.oldestWaiting, "OldestWaiting"},
		{&q.listProcesses, "ListProcesses"}, {&q.listQueues, "ListQueues"}, {&q.listOverrides, "ListOverrides"},
		{&q.pausedQueues, "PausedQueues"},
		{&q.lastTicks, "LastTicks"},
		{&q.fairLevels, "FairLevels"}, {&q.releaseMigrationLock, "ReleaseMigrationLock"},
		{&q.createMigrationProgressTable, "CreateMigrationProgressTable"}, {&q.migrationProgress, "MigrationProgress"},
		{&q.savepoint, "Savepoint"}, {&q.rollbackToSavepoint, "RollbackToSavepoint"}, {&q.releaseSavepoint, "ReleaseSavepoint"},
		{&q.shortLockWait, "ShortLockWait"}, {&q.restoreLockWait, "RestoreLockWait"},
	}
	for _, t := range texts {
		if *t.dst, err = render(t.name); err != nil {
			return nil, err
		}
	}
	q.states = map[State]string{}
	for st, text := range stateJobs {
		if text, err = expand(all, "state "+string(st), text); err != nil {
			return nil, err
		}
		q.states[st] = spell(text, c)
	}
	stmts := []struct {
		dst    **sqlStatement
		name   string
		params []string
	}{
		{&q.recordMigration, "RecordMigration", []string{"version", "name", "now"}},
		{&q.forgetMigration, "ForgetMigration", []string{"version"}},
		{&q.takeMigrationLock, "TakeMigrationLock", []string{"timeout"}},
		{&q.saveMigrationProgress, "SaveMigrationProgress", []string{"version", "direction", "statements"}},
		{&q.clearMigrationProgress, "ClearMigrationProgress", []string{"version"}},

		{&q.insertJobs, "InsertJobs", []string{"rows"}},
		{&q.lockReadyPlain, "LockReadyPlain", []string{"queue", "limit"}},
		{&q.lockReadyLimited, "LockReadyLimited", []string{"queue", "limit"}},
		{&q.lockReadyLimitedAt, "LockReadyLimitedAt", []string{"queue", "priority", "after", "before", "limit"}},
		{&q.lockReadyLimitedBefore, "LockReadyLimitedBefore", []string{"queue", "priority", "limit"}},
		{&q.lockReadyLimitedAfter, "LockReadyLimitedAfter", []string{"queue", "priority", "limit"}},
		{&q.lockReadyLike, "LockReadyLike", []string{"queue", "rate_keys", "kind", "limit"}},
		{&q.firstReadyLike, "FirstReadyLike", []string{"queue", "rate_keys", "kind"}},
		{&q.lastReadyLike, "LastReadyLike", []string{"queue", "rate_keys", "kind"}},
		{&q.markRunning, "MarkRunning", []string{"process_id", "now", "ids"}},
		{&q.completeJobs, "CompleteJobs", []string{"now", "ids", "process_id", "claim", "running"}},
		{&q.deleteJobs, "DeleteJobs", []string{"ids", "process_id", "claim", "running"}},
		{&q.lockDue, "LockDue", []string{"now", "limit"}},
		{&q.lockDueWaiting, "LockDueWaiting", []string{"now", "queues", "limit"}},
		{&q.lockDueBeyond, "LockDueBeyond", []string{"now", "keys", "limit"}},
		{&q.lockDueWaitingBeyond, "LockDueWaitingBeyond", []string{"now", "queues", "keys", "limit"}},
		{&q.markReady, "MarkReady", []string{"ids", "scheduled"}},
		{&q.notify, "Notify", []string{"queues"}},
		{&q.lockOrphans, "LockOrphans", []string{"process_ids", "lost_before", "limit"}},
		{&q.lockRunningOf, "LockRunningOf", []string{"process_id", "limit"}},
		{&q.lockRuns, "LockRuns", []string{"ids", "running", "process_id"}},
		{&q.lockFinished, "LockFinished", []string{"before", "limit"}},
		{&q.deleteJobsByID, "DeleteJobsByID", []string{"ids"}},
		{&q.recordAttempts, "RecordAttempts", []string{"now", "ids"}},
		{&q.loadAttempts, "LoadAttempts", []string{"job_id"}},
		{&q.deleteAttempts, "DeleteAttempts", []string{"job_ids"}},
		{&q.getJob, "GetJob", []string{"id"}},
		{&q.lockJob, "LockJob", []string{"id"}},
		{&q.listJobs, "ListJobs", []string{"state", "kind", "queue", "before", "limit"}},

		{&q.insertProcess, "InsertProcess", []string{"kind", "name", "hostname", "pid", "queues", "started_at", "heartbeat_at"}},
		{&q.heartbeat, "Heartbeat", []string{"now", "id"}},
		{&q.processExists, "ProcessExists", []string{"id"}},
		{&q.deleteProcess, "DeleteProcess", []string{"id"}},
		{&q.lockDeadProcesses, "LockDeadProcesses", []string{"before", "self", "limit"}},
		{&q.deleteProcesses, "DeleteProcesses", []string{"ids"}},

		{&q.setQueuePaused, "SetQueuePaused", []string{"name", "paused", "now"}},
		{&q.saveOverride, "SaveOverride", []string{"target", "to_count", "per_us", "burst", "now"}},
		{&q.deleteOverride, "DeleteOverride", []string{"target"}},

		{&q.lockBudgets, "LockBudgets", []string{"keys"}},
		{&q.lockFreeBudgets, "LockFreeBudgets", []string{"keys"}},
		{&q.readBudgets, "ReadBudgets", []string{"keys"}},
		{&q.getBudget, "GetBudget", []string{"key"}},
		{&q.insertBudgets, "InsertBudgets", []string{"rows"}},
		{&q.saveBudgets, "SaveBudgets", []string{"rows"}},
		{&q.moveCursor, "MoveCursor", []string{"to", "parked", "slotted_priority", "key", "from", "interval_ns", "burst"}},
		{&q.lockParkedBudgets, "LockParkedBudgets", []string{"until", "limit"}},
		{&q.readRepriced, "ReadRepriced", []string{"target", "prefix", "past", "after", "interval_ns", "burst", "limit"}},
		{&q.lockParked, "LockParked", []string{"key", "limit"}},
		{&q.lockSlotted, "LockSlotted", []string{"key", "from", "priority", "limit"}},
		{&q.countParked, "CountParked", []string{"key"}},
		{&q.uncountParked, "UncountParked", []string{"key"}},
		{&q.lockIdleBudgets, "LockIdleBudgets", []string{"now", "limit"}},
		{&q.deleteBudgets, "DeleteBudgets", []string{"names"}},
		{&q.pageBudgets, "PageBudgets", []string{"after", "limit"}},
		{&q.getBudgetWaiting, "GetBudgetWaiting", []string{"key"}},
		{&q.countBudgets, "CountBudgets", []string{"limit"}},

		{&q.lockSemaphores, "LockSemaphores", []string{"keys"}},
		{&q.lockFreeSemaphores, "LockFreeSemaphores", []string{"keys"}},
		{&q.existingSemaphores, "ExistingSemaphores", []string{"keys"}},
		{&q.probeSemaphores, "ProbeSemaphores", []string{"keys"}},
		{&q.insertSemaphores, "InsertSemaphores", []string{"rows"}},
		{&q.saveSemaphores, "SaveSemaphores", []string{"rows"}},
		{&q.lockBlocked, "LockBlocked", []string{"key", "limit"}},
		{&q.blockedLimit, "BlockedLimit", []string{"key"}},
		{&q.markSlots, "MarkSlots", []string{"holds", "ids"}},
		{&q.lockRunningHolders, "LockRunningHolders", []string{"keys"}},
		{&q.expiredSemaphores, "ExpiredSemaphores", []string{"now", "limit"}},
		{&q.blockedKeys, "BlockedKeys", []string{"limit"}},
		{&q.lockIdleSemaphores, "LockIdleSemaphores", []string{"after", "before", "limit"}},
		{&q.blockedAmong, "BlockedAmong", []string{"keys"}},
		{&q.readUndeclaredSemaphores, "ReadUndeclaredSemaphores", []string{"scope", "prefix", "past", "after", "limit_to", "duration_us", "limit"}},
		{&q.deleteSemaphores, "DeleteSemaphores", []string{"names"}},
		{&q.pageSemaphores, "PageSemaphores", []string{"after", "limit"}},
		{&q.countSemaphores, "CountSemaphores", []string{"limit"}},

		{&q.insertCoalescing, "InsertCoalescing", []string{"kind", "queue", "priority", "state", "args", "max_attempts", "created_at", "run_at",
			"rate_keys", "conc_key", "conc_limit", "conc_duration", "conc_discard", "holds_slot", "coalesce_key", "first_call_at", "metadata",
			"fair_key", "fair_start"}},
		{&q.lockPending, "LockPending", []string{"key"}},
		{&q.lockCoalesceKeys, "LockCoalesceKeys", []string{"rows"}},
		{&q.readCoalesceKey, "ReadCoalesceKey", []string{"name"}},
		{&q.lockPendingByID, "LockPendingByID", []string{"id", "key"}},
		{&q.pointCoalesceKeys, "PointCoalesceKeys", []string{"rows"}},
		{&q.lockIdleCoalesceKeys, "LockIdleCoalesceKeys", []string{"after", "limit"}},
		{&q.releasedCoalesceKeys, "ReleasedCoalesceKeys", []string{"names"}},
		{&q.coalesceKeysHeldTwice, "CoalesceKeysHeldTwice", []string{"limit"}},
		{&q.deleteCoalesceKeys, "DeleteCoalesceKeys", []string{"names"}},
		{&q.updateCoalesced, "UpdateCoalesced", []string{"id", "args", "calls", "state", "run_at", "release"}},
		{&q.insertCall, "InsertCall", []string{"job_id", "seq", "args", "now"}},
		{&q.loadCalls, "LoadCalls", []string{"job_ids"}},
		{&q.deleteCalls, "DeleteCalls", []string{"job_ids"}},

		{&q.insertTick, "InsertTick", []string{"task", "run_at", "now"}},
		{&q.setTickJob, "SetTickJob", []string{"job_id", "task", "run_at"}},
		{&q.oldTicks, "OldTicks", []string{"before", "limit"}},
		{&q.deleteTick, "DeleteTick", []string{"task", "run_at"}},

		{&q.lockReadyFair, "LockReadyFair", []string{"queue", "limited", "limit"}},
		{&q.insertFairKeys, "InsertFairKeys", []string{"rows"}},
		{&q.lockFairKeys, "LockFairKeys", []string{"queue", "priority", "keys"}},
		{&q.fairVirtualTime, "FairVirtualTime", []string{"queue", "priority", "keys"}},
		{&q.fairPruneBound, "FairPruneBound", []string{"queue", "priority", "keys", "served"}},
		{&q.lockFairAnchor, "LockFairAnchor", []string{"queue", "priority"}},
		{&q.lockPrunableFairKeys, "LockPrunableFairKeys", []string{"queue", "priority", "after", "through", "anchor", "limit"}},
		{&q.readPrunableFairKeys, "ReadPrunableFairKeys", []string{"queue", "priority", "keys", "served", "names"}},
		{&q.saveFairKeys, "SaveFairKeys", []string{"rows"}},
		{&q.deleteFairKeys, "DeleteFairKeys", []string{"queue", "priority", "keys"}},
		{&q.refundFairKeys, "RefundFairKeys", []string{"ids", "queue", "priority", "keys"}},
	}
	for _, s := range stmts {
		text, err := render(s.name)
		if err != nil {
			return nil, err
		}
		if text == "" {
			continue
		}
		if *s.dst, err = prepare(s.name, text, c, s.params...); err != nil {
			return nil, err
		}
	}
	if err := q.migrationStatements(); err != nil {
		return nil, fmt.Errorf("dialect %s: %w", d.Name(), err)
	}
	return q, nil
}

// migrationStatements checks that a database has the session's migration
// lock whole, and the migration progress whole and only with that lock:
// progress is recorded statement by statement, in transactions of their
// own, so only a lock that outlives a transaction keeps other migrators
// out between them.
func (q *SQL) migrationStatements() error {
	if (q.takeMigrationLock == nil) != (q.releaseMigrationLock == "") {
		return fmt.Errorf("TakeMigrationLock and ReleaseMigrationLock go together")
	}
	progress := []bool{q.createMigrationProgressTable != "", q.migrationProgress != "",
		q.saveMigrationProgress != nil, q.clearMigrationProgress != nil}
	if slices.Contains(progress, true) && (slices.Contains(progress, false) || q.takeMigrationLock == nil) {
		return fmt.Errorf("the migration progress needs CreateMigrationProgressTable, MigrationProgress, SaveMigrationProgress, " +
			"ClearMigrationProgress and the session's migration lock (TakeMigrationLock)")
	}
	return nil
}

// CreateMigrationsTable creates the table that records applied migrations.
func (q *SQL) CreateMigrationsTable() string { return q.createMigrationsTable }

// LockMigrations and UnlockMigrations serialize concurrent migrators
// inside a migration run's transaction, which each migration runs in a
// savepoint of; either may be empty.
func (q *SQL) LockMigrations() string { return q.lockMigrations }

// UnlockMigrations releases what LockMigrations took, before the commit.
func (q *SQL) UnlockMigrations() string { return q.unlockMigrations }

// GenericPlans makes the rest of a transaction run its prepared statements
// on generic plans, planned once instead of at every run; empty where the
// database has no such switch (only PostgreSQL has one).
func (q *SQL) GenericPlans() string { return q.genericPlans }

// AppliedMigrations lists the applied versions.
func (q *SQL) AppliedMigrations() string { return q.appliedMigrations }

// RecordMigration marks a version applied.
func (q *SQL) RecordMigration(version int, name string, now int64) (string, []any) {
	return q.recordMigration.bind(version, name, now)
}

// ForgetMigration marks a version reverted.
func (q *SQL) ForgetMigration(version int) (string, []any) { return q.forgetMigration.bind(version) }

// SessionLock reports whether the database's migration lock belongs to a
// connection (TakeMigrationLock) rather than to a transaction
// (LockMigrations).
func (q *SQL) SessionLock() bool { return q.takeMigrationLock != nil }

// TakeMigrationLock takes the migration lock of the database for the
// connection it runs on, waiting at most timeout seconds, and returns one
// row: 1 when it took the lock, 0 when the wait ran out, NULL on an
// error. The lock outlives transactions: ReleaseMigrationLock releases
// it. Empty unless SessionLock.
func (q *SQL) TakeMigrationLock(timeout int64) (string, []any) {
	if q.takeMigrationLock == nil {
		return "", nil
	}
	return q.takeMigrationLock.bind(timeout)
}

// ReleaseMigrationLock releases what TakeMigrationLock took, on the same
// connection.
func (q *SQL) ReleaseMigrationLock() string { return q.releaseMigrationLock }

// CoalesceKeysHeldTwice lists the coalesce keys more than one job holds,
// as rows of key and job id in key and id order, at most limit rows.
func (q *SQL) CoalesceKeysHeldTwice(limit int) (string, []any) {
	return q.coalesceKeysHeldTwice.bind(limit)
}

// TracksMigrationProgress reports whether the database records how many
// statements of a migration have run (MySQL, whose DDL commits at once,
// so that a migration that failed part way resumes after them).
func (q *SQL) TracksMigrationProgress() bool { return q.migrationProgress != "" }

// CreateMigrationProgressTable creates the table of migration progress
// unless it exists. Empty unless TracksMigrationProgress.
func (q *SQL) CreateMigrationProgressTable() string { return q.createMigrationProgressTable }

// MigrationProgress lists the progress recorded: version, direction ("up"
// or "down") and how many statements of that direction have run. Empty
// unless TracksMigrationProgress.
func (q *SQL) MigrationProgress() string { return q.migrationProgress }

// SaveMigrationProgress records that statements statements of version's
// direction have run. Empty unless TracksMigrationProgress.
func (q *SQL) SaveMigrationProgress(version int, direction string, statements int) (string, []any) {
	if q.saveMigrationProgress == nil {
		return "", nil
	}
	return q.saveMigrationProgress.bind(version, direction, statements)
}

// ClearMigrationProgress forgets version's progress. Empty unless
// TracksMigrationProgress.
func (q *SQL) ClearMigrationProgress(version int) (string, []any) {
	if q.clearMigrationProgress == nil {
		return "", nil
	}
	return q.clearMigrationProgress.bind(version)
}
