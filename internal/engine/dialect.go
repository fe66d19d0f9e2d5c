package engine

import (
	"io/fs"
)

// Dialect is the part of a store that differs between databases. The
// statements themselves are the catalog's (sql/*.sql), written once and
// rendered from the dialect's Capabilities; a dialect replaces only the
// fragments and statements its database spells differently
// (Replacements), and supplies the bulk update whose form no capability
// captures (SetJobs). The order of statements, and every decision between them,
// is the store's and is the same on every database.
//
// Optional interfaces add what some databases have: DataErrorer,
// ArgsLimiter, IDStep.
type Dialect interface {
	// Name is "postgres", "mysql" or "sqlite".
	Name() string
	// Capabilities says how the database spells placeholders, lists,
	// booleans, upserts, RETURNING and row locks.
	Capabilities() Capabilities
	// Replacements replaces catalog fragments and statements by name, in
	// the catalog's syntax (sql/README.md); "" replaces none.
	Replacements() string
	// Migrations holds the numbered migrations, NNN_name.up.sql and
	// NNN_name.down.sql, statements separated by lines ending in ";".
	Migrations() fs.FS
	// Now reads the database's clock in microseconds, or returns "" when
	// the host's clock is the database's (SQLite).
	Now() string
	// IsUndefinedTable reports whether err says a table or column is
	// missing, which means migrations are pending.
	IsUndefinedTable(err error) bool
	// IsRetryable reports whether err is a deadlock or serialization
	// failure after which the whole transaction may simply run again.
	IsRetryable(err error) bool
	// SetJobs applies transitions to jobs currently in state from (and,
	// when processID is not 0, claimed by that process under the row's
	// Claim), in one statement that
	// sets, for each row v of the rows it binds (columns SetJobsColumns),
	// SetJobsAssignments in the job j it names, where SetJobsCondition
	// holds; now stamps the deferrals among them.
	SetJobs(from State, processID, now int64, rows []SetRow) (string, []any)
}

// SetJobsColumns are the columns of the rows a SetJobs statement binds,
// in SetRow's order, named apart from the jobs' own so that no assignment
// is ambiguous.
const SetJobsColumns = "id, new_state, new_run_at, new_wait_key, new_error, attempt_delta, new_finished_at, deferral, deferral_at, run_claim"

// SetJobsCondition is which jobs a SetJobs statement may change: those
// still in state from and, when processID is not 0, claimed by that
// process under the row's run_claim (the run a result or a release is
// for: a job's claims only ever grow, so a result written again never
// matches a later run); each argument is how the dialect spells that
// parameter.
func SetJobsCondition(from, processID, processIDAgain string) string {
	return "j.state = " + from + " AND (" + processID + " = 0 OR (j.process_id = " + processIDAgain + " AND j.claims = v.run_claim))"
}

// SetJobsAssignments is what SetJobs sets in each job j from its row v:
// the rules of a transition, written once for every database. A run_at
// or error of 0 or "" keeps the stored one; a final state gives up the
// coalesce key; a deferral (its reason not "") counts one more, keeps its
// reason, and stamps deferral_at (the statement's now) as the start of
// the job's wait unless it has waited on limits since its last run.
const SetJobsAssignments = `state = v.new_state,
  run_at = CASE WHEN v.new_run_at = 0 THEN j.run_at ELSE v.new_run_at END,
  wait_key = NULLIF(v.new_wait_key, ''),
  last_error = COALESCE(NULLIF(v.new_error, ''), j.last_error),
  attempt = j.attempt + v.attempt_delta,
  finished_at = NULLIF(v.new_finished_at, 0),
  coalesce_key = CASE WHEN v.new_state IN ('completed', 'failed', 'cancelled') THEN NULL ELSE j.coalesce_key END,
  deferrals = j.deferrals + CASE WHEN v.deferral = '' THEN 0 ELSE 1 END,
  deferral_reason = COALESCE(NULLIF(v.deferral, ''), j.deferral_reason),
  deferred_at = CASE WHEN v.deferral = '' OR j.deferred_at > COALESCE(j.attempted_at, 0) THEN j.deferred_at ELSE v.deferral_at END`

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
	"metadata, deferrals, deferral_reason, CASE WHEN deferred_at > COALESCE(attempted_at, 0) THEN deferred_at END, claims"

// JobInfoColumns are the columns an inspection reads, in JobInfo's scan
// order.
const JobInfoColumns = JobColumns + ", state, attempted_at, finished_at, process_id, last_error, conc_limit, conc_duration, conc_discard, fair_key, fair_start"

// BudgetColumns are a budget row's columns, in BudgetRow's scan order.
const BudgetColumns = "name, tat_ns, next_slot_ns, interval_ns, burst, parked, updated_at, slotted_priority"

// SemaphoreColumns are a semaphore row's columns, in SemaphoreRow's scan
// order.
const SemaphoreColumns = "name, held, limit_to, duration_us, expires_at, updated_at"

// JobQueueNotPaused says the queue of job j (the alias) is not paused: the
// catalog's {JobQueueNotPaused}. A paused queue's jobs stay where they are
// until it resumes: they take none of the slots of a budget or of a
// concurrency key that other queues' jobs share, which would wait behind
// jobs that cannot run. The dashboards' counts of the jobs ahead of one
// (DashboardDialect) pass them over with it too, as the hand-outs do, but
// for the jobs of the one's own queue: those keep their places in the
// line for the resume. It reads as written on every database (TRUE is 1 where booleans are
// integers).
const JobQueueNotPaused = "NOT EXISTS (SELECT 1 FROM sluice_queues q WHERE q.name = j.queue AND q.paused = TRUE)"

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
	// touches them before: those of its running jobs claimed more than
	// Duration before then (MaintainSemaphores).
	ExpiresAt int64
	UpdatedAt int64
}

// DueRow is a scheduled job due for promotion.
type DueRow struct {
	ID        int64
	Queue     string
	Conc      *Conc
	HoldsSlot bool
	// CameBack is set when the job was ready before — it ran, or a claim
	// deferred it — and gave its slot back, or lost it, since: with no
	// slot free it is blocked, never discarded (Discard applies to a job
	// becoming ready for the first time).
	CameBack bool
	// Kind is the job's kind, which a promotion that discards the job
	// reports (LockDue reads it; empty where no discard can happen).
	Kind string
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
	// LastError and FinishedAt are set for a job discarded at enqueue;
	// a give-back's mark in LastError is quoted (LastErrorText).
	LastError  string
	FinishedAt int64
	// CoalesceKey is held while the job is pending; FirstCallAt is when
	// its first call came.
	CoalesceKey string
	FirstCallAt int64
	// Metadata is the job's encoded metadata; "" is stored as NULL.
	Metadata string
	// FairKey is the job's fairness key ("" for none, stored as NULL), and
	// FairStart its virtual start time, set by the enqueue.
	FairKey   string
	FairStart int64
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
	// Claim, when SetJobs names a process, moves the job only while it
	// runs under that claim (its claims as the run was claimed): the run
	// whose result or release this is.
	Claim int64
	// Record is set for a give-back: the record of its streak, which
	// Error holds and SetJobs keeps as written. Every other give-back
	// mark in Error is quoted (LastErrorText).
	Record string
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
	// SlottedPriority is the least urgent priority (the largest number)
	// among the jobs the budget handed slots to while its slots lay ahead:
	// a claim looks for a slot a more urgent job may take only below it.
	SlottedPriority int
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
	// Before, when not 0, lists only jobs of lower ids: the page after
	// one whose last job had that id.
	Before int64
	Limit  int
}
