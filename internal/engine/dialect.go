package engine

import (
	"io/fs"
)

// Dialect is the part of a store that differs between databases: SQL text,
// how lists and rows are passed, and how errors are recognised. The order
// of statements, and every decision between them, is the store's and is
// the same on every database.
//
// Each statement method returns the query and its arguments. Times are
// microseconds since the Unix epoch. Lists are never empty.
type Dialect interface {
	// Name is "postgres", "mysql" or "sqlite".
	Name() string
	// Migrations holds the numbered migrations, NNN_name.up.sql and
	// NNN_name.down.sql, statements separated by lines ending in ";".
	Migrations() fs.FS
	// InsertReturnsIDs reports whether InsertJobs returns the new ids as
	// rows; otherwise they follow from the first id the insert reports.
	InsertReturnsIDs() bool
	// MaxKeyLength is the longest key (in characters) the key columns
	// hold; 0 means no limit.
	MaxKeyLength() int
	// IsUndefinedTable reports whether err says a table or column is
	// missing, which means migrations are pending.
	IsUndefinedTable(err error) bool
	// IsRetryable reports whether err is a deadlock or serialization
	// failure after which the whole transaction may simply run again.
	IsRetryable(err error) bool

	// CreateMigrationsTable creates the table that records applied
	// migrations, if it is missing.
	CreateMigrationsTable() string
	// LockMigrations and UnlockMigrations serialize concurrent migrators;
	// either may be empty.
	LockMigrations() string
	UnlockMigrations() string
	// AppliedMigrations lists the applied versions.
	AppliedMigrations() string
	// RecordMigration and ForgetMigration mark a version applied or not.
	RecordMigration(version int, name string, now int64) (string, []any)
	ForgetMigration(version int) (string, []any)

	// InsertJobs inserts jobs, returning their ids as rows when
	// InsertReturnsIDs. It may also wake listeners for ready jobs.
	InsertJobs(jobs []InsertRow) (string, []any)
	// MaxInsertBatch is how many jobs one InsertJobs may carry.
	MaxInsertBatch() int
	// Now reads the database's clock in microseconds, or returns "" when
	// the host's clock is the database's (SQLite).
	Now() string

	// LockReady selects (and locks, skipping locked rows) up to limit ready
	// jobs of one queue, by priority then id, unless the queue is paused:
	// those that carry no rate-limit key, or, with limited, those that do.
	// Columns: JobColumns.
	LockReady(queue string, limited bool, limit int) (string, []any)
	// GetBudget reads one budget without locking it. Columns:
	// BudgetColumns.
	GetBudget(key string) (string, []any)
	// MoveCursor sets a budget's next slot to to and adds parked to its
	// parked count, if its next slot is still from; it affects no row
	// otherwise.
	MoveCursor(key string, from, to int64, parked int) (string, []any)
	// LockReadyLike selects and locks, skipping locked rows, up to limit
	// ready jobs of a queue and kind whose rate keys are exactly rateKeys
	// and that hold no concurrency slot. Columns: id.
	LockReadyLike(queue, kind, rateKeys string, limit int) (string, []any)
	// MarkRunning claims locked jobs for a process.
	MarkRunning(ids []int64, processID, now int64) (string, []any)
	// CompleteJobs marks running jobs of a process completed.
	CompleteJobs(ids []int64, processID, now int64) (string, []any)
	// DeleteJobs deletes running jobs of a process (completion that keeps
	// nothing).
	DeleteJobs(ids []int64, processID int64) (string, []any)
	// SetJobs applies transitions to jobs currently in state from (and,
	// when processID is not 0, claimed by that process). now stamps the
	// deferrals among them.
	SetJobs(from State, processID, now int64, rows []SetRow) (string, []any)

	// LockDue selects and locks up to limit scheduled jobs due at now.
	// Columns: id, queue, conc_key, conc_limit, conc_duration, conc_discard,
	// holds_slot.
	LockDue(now int64, limit int) (string, []any)
	// LockDueWaiting selects and locks, skipping locked rows, up to limit
	// scheduled jobs of the queues that wait on a rate limit (a deferral or
	// an upstream 429) and are due at now, soonest first. Columns:
	// JobColumns, conc_limit, conc_duration, conc_discard.
	LockDueWaiting(queues []string, now int64, limit int) (string, []any)
	// MarkReady makes locked jobs ready.
	MarkReady(ids []int64) (string, []any)
	// Notify wakes listening workers for the queues, or returns "".
	Notify(queues []string) (string, []any)

	// InsertProcess registers a process; it returns the id as a row when
	// InsertReturnsIDs.
	InsertProcess(p ProcessRow) (string, []any)
	// Heartbeat stamps a process's heartbeat.
	Heartbeat(id, now int64) (string, []any)
	// DeleteProcess removes a process.
	DeleteProcess(id int64) (string, []any)
	// LockDeadProcesses selects and locks processes whose heartbeat is
	// older than before. Columns: id.
	LockDeadProcesses(before int64, limit int) (string, []any)
	// LockOrphans selects and locks running jobs whose process is gone or
	// listed. Columns: id, queue, attempt, max_attempts, conc_key,
	// holds_slot.
	LockOrphans(processIDs []int64, limit int) (string, []any)
	// DeleteProcesses removes processes by id.
	DeleteProcesses(ids []int64) (string, []any)
	// ListProcesses lists processes. Columns: ProcessColumns.
	ListProcesses() string

	// SetQueuePaused pauses or resumes a queue.
	SetQueuePaused(queue string, paused bool, now int64) (string, []any)
	// ListQueues lists queues known from jobs and pauses. Columns: name,
	// paused.
	ListQueues() string

	// LockBudgets selects and locks budget rows in key order. Columns:
	// BudgetColumns.
	LockBudgets(keys []string) (string, []any)
	// InsertBudgets inserts empty budget rows for keys, ignoring those
	// that exist.
	InsertBudgets(keys []string) (string, []any)
	// SaveBudgets writes budget rows back.
	SaveBudgets(rows []BudgetRow) (string, []any)
	// LockParkedBudgets selects and locks, skipping locked rows, budgets
	// with parked jobs whose next slot falls before until, soonest first.
	// (Whether a budget hands out slots — a paused one waits for its
	// probe — is decided by the store.) Columns: BudgetColumns.
	LockParkedBudgets(until int64, limit int) (string, []any)
	// LockParked selects and locks, skipping locked rows, the first parked
	// jobs of a budget by priority then id. Columns: id, rate_keys.
	LockParked(key string, limit int) (string, []any)
	// CountParked counts a budget's parked jobs, whether or not another
	// transaction holds them locked. Columns: count.
	CountParked(key string) (string, []any)
	// LockIdleBudgets selects and locks, skipping locked rows, up to limit
	// budgets that may be idle at now: their times have passed and no job
	// is parked on them. Columns: BudgetColumns.
	LockIdleBudgets(now int64, limit int) (string, []any)
	// DeleteBudgets deletes budgets by name.
	DeleteBudgets(names []string) (string, []any)
	// ListBudgets lists budgets with how many jobs wait on each. Columns:
	// BudgetColumns, waiting.
	ListBudgets() string

	// JobsByState counts jobs per queue and state. Columns: queue, state,
	// count.
	JobsByState() string
	// UnfinishedByState counts the jobs that are not completed or
	// cancelled, per queue and state. Columns: queue, state, count.
	UnfinishedByState() string
	// OldestWaiting finds, per queue, the oldest job waiting to run, split
	// by whether a limit holds it (a rate-limit wait or a concurrency
	// block). Columns: queue, throttled (0 or 1), created_at.
	OldestWaiting() string
	// ListJobs lists jobs, newest first, filtered by whichever of state,
	// kind and queue are set. Columns: JobInfoColumns.
	ListJobs(f JobFilter) (string, []any)
	// GetJob reads one job. Columns: JobInfoColumns.
	GetJob(id int64) (string, []any)
	// LockJob reads and locks one job. Columns: JobInfoColumns.
	LockJob(id int64) (string, []any)
	// LockFinished selects, skipping locked rows, up to limit completed or
	// cancelled jobs that finished before the given time. Columns: id,
	// calls.
	LockFinished(before int64, limit int) (string, []any)
	// DeleteJobsByID deletes jobs.
	DeleteJobsByID(ids []int64) (string, []any)

	// LockSemaphores selects and locks semaphores in key order. Columns:
	// SemaphoreColumns.
	LockSemaphores(keys []string) (string, []any)
	// InsertSemaphores inserts unused semaphore rows for keys, ignoring
	// those that exist.
	InsertSemaphores(keys []string) (string, []any)
	// SaveSemaphores writes semaphores back.
	SaveSemaphores(rows []SemaphoreRow) (string, []any)
	// LockBlocked selects and locks, skipping locked rows, the first
	// blocked jobs of a key by priority then id. Columns: id, queue.
	LockBlocked(key string, limit int) (string, []any)
	// MarkSlots records whether jobs hold a slot.
	MarkSlots(ids []int64, holds bool) (string, []any)
	// ReleaseHolders clears the slot of every job of the keys that holds
	// one: the keys expired and their holders are presumed lost.
	ReleaseHolders(keys []string) (string, []any)
	// LockSlotHolders selects and locks, of the listed jobs, those that hold
	// a slot (and, when processID is not 0, run for that process). Columns:
	// id, conc_key.
	LockSlotHolders(ids []int64, processID int64) (string, []any)
	// LockExpiredSemaphores selects and locks, skipping locked rows,
	// semaphores with taken slots that expired before now. Columns:
	// SemaphoreColumns.
	LockExpiredSemaphores(now int64, limit int) (string, []any)
	// BlockedKeys selects keys with blocked jobs whose semaphore has a free
	// slot or no row. Columns: conc_key.
	BlockedKeys(limit int) (string, []any)
	// ListSemaphores lists semaphores with their blocked and holding jobs.
	// Columns: SemaphoreColumns, blocked, holding.
	ListSemaphores() string

	// InsertCoalescing inserts one job that takes a coalesce key unless a
	// pending job holds it: it returns the new id as a row (none on a
	// conflict) when InsertReturnsIDs, else it affects no row on a
	// conflict.
	InsertCoalescing(job InsertRow) (string, []any)
	// LockPending selects and locks the pending job that holds a coalesce
	// key. Columns: JobInfoColumns, first_call_at.
	LockPending(key string) (string, []any)
	// UpdateCoalesced applies a joining call to the pending job.
	UpdateCoalesced(u CoalesceUpdate) (string, []any)
	// InsertCall stores one collected call.
	InsertCall(jobID int64, seq int, args string, now int64) (string, []any)
	// LoadCalls reads the collected calls of jobs. Columns: job_id, args,
	// in job then call order.
	LoadCalls(jobIDs []int64) (string, []any)
	// DeleteCalls deletes the collected calls of jobs.
	DeleteCalls(jobIDs []int64) (string, []any)

	// InsertTick records a recurring task's tick unless it is recorded; it
	// affects no row when it is.
	InsertTick(task string, runAt, now int64) (string, []any)
	// SetTickJob records the job a tick enqueued.
	SetTickJob(task string, runAt, jobID int64) (string, []any)
	// LastTicks lists each task's latest recorded tick. Columns: task,
	// run_at, ran_at, job_id.
	LastTicks() string
	// DeleteTicks deletes the records of ticks before the given time.
	DeleteTicks(before int64) (string, []any)

	// SaveOverride sets a rate-limit override.
	SaveOverride(o OverrideRow) (string, []any)
	// DeleteOverride removes one.
	DeleteOverride(target string) (string, []any)
	// ListOverrides lists them. Columns: target, to_count, per_us, burst,
	// updated_at.
	ListOverrides() string
}

// OverrideRow is a stored rate-limit override.
type OverrideRow struct {
	Target    string
	To        int
	PerUS     int64
	Burst     int
	UpdatedAt int64
}

// JobColumns are the columns a claim reads, in Job's scan order.
const JobColumns = "id, kind, queue, priority, args, attempt, max_attempts, created_at, run_at, rate_keys, conc_key, holds_slot, calls, wait_key, " +
	"metadata, deferrals, deferral_reason, CASE WHEN deferred_at > COALESCE(attempted_at, 0) THEN deferred_at END"

// JobInfoColumns are the columns an inspection reads, in JobInfo's scan
// order.
const JobInfoColumns = JobColumns + ", state, attempted_at, finished_at, process_id, last_error, conc_limit, conc_duration, conc_discard"

// BudgetColumns are a budget row's columns, in BudgetRow's scan order.
const BudgetColumns = "name, tat_ns, next_slot_ns, interval_ns, burst, parked, updated_at"

// SemaphoreColumns are a semaphore row's columns, in SemaphoreRow's scan
// order.
const SemaphoreColumns = "name, held, limit_to, duration_us, expires_at, updated_at"

// SemaphoreRow is a concurrency key's stored state.
type SemaphoreRow struct {
	Name string
	// Held is how many jobs hold a slot: exactly the jobs of the key whose
	// holds_slot is set.
	Held int
	// Limit is To, as last declared; 0 for a row not yet used.
	Limit      int
	DurationUS int64
	// ExpiresAt is when the key's slots are presumed lost if nothing
	// touches them before.
	ExpiresAt int64
	UpdatedAt int64
}

// DueRow is a scheduled job due for promotion.
type DueRow struct {
	ID        int64
	Queue     string
	Conc      *Conc
	HoldsSlot bool
}

// ProcessColumns are a process row's columns, in ProcessRow's scan order.
const ProcessColumns = "id, kind, name, hostname, pid, queues, started_at, heartbeat_at"

// InsertRow is one job as InsertJobs writes it.
type InsertRow struct {
	Kind        string
	Queue       string
	Priority    int
	State       State
	Args        string
	MaxAttempts int
	CreatedAt   int64
	RunAt       int64
	RateKeys    string
	// The concurrency limit, and whether the job took a slot.
	ConcKey      string
	ConcLimit    int
	ConcDuration int64
	ConcDiscard  bool
	HoldsSlot    bool
	// LastError and FinishedAt are set for a job discarded at enqueue.
	LastError  string
	FinishedAt int64
	// CoalesceKey is held while the job is pending; FirstCallAt is when
	// its first call came.
	CoalesceKey string
	FirstCallAt int64
	// Metadata is the job's encoded metadata; "" is stored as NULL.
	Metadata string
}

// PendingRow is a pending job that holds a coalesce key, as a joining call
// finds it.
type PendingRow struct {
	JobInfo
	FirstCallAt int64
}

// CoalesceUpdate is what a joining call changes in the pending job.
type CoalesceUpdate struct {
	ID int64
	// Args, when not empty, replaces the job's args.
	Args string
	// Calls is the job's call count.
	Calls int
	// State and RunAt are the job's (RunAt 0 keeps it).
	State State
	RunAt int64
	// ReleaseKey frees the coalesce key: the job is full.
	ReleaseKey bool
}

// SetRow is one job's transition as SetJobs writes it. Empty strings and
// zero times are stored as NULL (WaitKey, FinishedAt) or keep the stored
// value (Error, RunAt).
type SetRow struct {
	ID           int64
	State        State
	RunAt        int64
	WaitKey      string
	Error        string
	AttemptDelta int
	FinishedAt   int64
	// Deferral, when set, counts the transition as a rate-limit deferral
	// with this reason: deferrals goes up by one, deferral_reason is set,
	// and deferred_at is stamped with now unless the job has been waiting
	// on its limits since before (deferred after its last run).
	Deferral string
}

// BudgetRow is a rate-limit budget's stored state.
type BudgetRow struct {
	Name       string
	TAT        int64
	NextSlot   int64
	IntervalNS int64
	Burst      int
	Parked     int
	UpdatedAt  int64
}

// ProcessRow is a registered worker or dispatcher.
type ProcessRow struct {
	ID          int64
	Kind        string
	Name        string
	Hostname    string
	PID         int
	Queues      string
	StartedAt   int64
	HeartbeatAt int64
}

// JobFilter narrows ListJobs.
type JobFilter struct {
	State State
	Kind  string
	Queue string
	Limit int
}
