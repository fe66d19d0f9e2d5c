package mysql

import (
	"strings"

	"github.com/sluicequeue/sluice/internal/engine"
)

// What MySQL spells its own way. Everything else is the engine's catalog
// (internal/engine/sql), rendered with "?" placeholders, integer
// booleans and ON DUPLICATE KEY UPDATE. A locking read does not lock the
// rows its subqueries read, so the paused check inside a claim takes no
// lock on the queue row.

// Capabilities: row locks and ON DUPLICATE KEY; no arrays, no RETURNING,
// booleans as integers; keys of at most 255 characters.
func (Dialect) Capabilities() engine.Capabilities {
	return engine.Capabilities{RowLocks: true, DuplicateKey: true, MaxKeyLength: 255, MaxInsertBatch: 1000}
}

// Replacements replaces the predicates that say a job is in a state with
// reads of the generated key columns that hold a value only in that state
// (migrations 007, 010, 013, 014, 016, 018 and 019), each with an index of its own;
// the lock of dead processes (along the primary key); its migrations
// table, lock and progress; and adds the probe of a promotion's new
// semaphores (ProbeSemaphores).
func (Dialect) Replacements() string { return replacements }

const replacements = `
-- fragment: Bytewise

-- fragment: ReadyPlainJob
j.ready_plain IS NOT NULL

-- fragment: ReadyPlainQueue
j.ready_plain

-- fragment: ReadyPlain
j.ready_plain = :queue

-- fragment: ReadyLimitedJob
j.ready_limited IS NOT NULL

-- fragment: ReadyLimitedQueue
j.ready_limited

-- fragment: ReadyLimited
j.ready_limited = :queue

-- fragment: ReadyFairJob
j.ready_fair IS NOT NULL

-- fragment: ReadyFairQueue
j.ready_fair

-- fragment: ReadyFair
j.ready_fair = :queue

-- fragment: ScheduledJob
j.due_at IS NOT NULL

-- fragment: DueAt
j.due_at

-- fragment: ScheduledKey
j.scheduled_key

-- fragment: DelayedJob
j.delayed_queue IS NOT NULL

-- fragment: DelayedQueue
j.delayed_queue

-- fragment: OldestDelayed
-- A loose index scan of its own: one entry of sluice_jobs_delayed per
-- queue ("Using index for group-by").
SELECT j.delayed_queue, 0, MIN(j.due_at) FROM sluice_jobs j WHERE j.delayed_queue IS NOT NULL GROUP BY j.delayed_queue

-- fragment: ParkedPlainJob
j.parked_plain IS NOT NULL

-- fragment: ParkedPlainKey
j.parked_plain

-- fragment: ParkedFairJob
j.parked_fair IS NOT NULL

-- fragment: ParkedFairKey
j.parked_fair

-- fragment: WaitingFairJob
j.waiting_fair IS NOT NULL

-- fragment: WaitingFairQueue
j.waiting_fair

-- fragment: WaitingFair
j.waiting_fair = :queue

-- fragment: BlockedJob
j.blocked_key IS NOT NULL

-- fragment: BlockedKey
j.blocked_key

-- fragment: BlockedFairJob
j.blocked_fair IS NOT NULL

-- fragment: BlockedFairKey
j.blocked_fair

-- fragment: RunningJob
j.running_process IS NOT NULL

-- fragment: RunningProcess
j.running_process

-- fragment: DoneJob
j.done_at IS NOT NULL

-- fragment: DoneAt
j.done_at

-- fragment: FailedJob
j.failed_queue IS NOT NULL

-- fragment: FailedQueue
j.failed_queue

-- name: LockDeadProcesses
-- Read in the primary key's order, not through the index of heartbeats:
-- InnoDB, even at READ COMMITTED, keeps the lock of the first entry past
-- a range it reads of a secondary index, here the live process with the
-- oldest heartbeat, whose beats would then wait for the reap to commit.
-- Along the primary key it lets go of each row the condition refuses.
SELECT id FROM sluice_processes FORCE INDEX (PRIMARY) WHERE heartbeat_at < :before AND id <> :self ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED;

-- name: ProbeSemaphores
-- Locks the rows of :keys, which a read found none of, without waiting:
-- it fails at once (3572 on MySQL, 1205 on MariaDB, only the statement
-- undone) when another transaction holds one or is inserting one, which
-- a locking read sees in InnoDB; an empty answer leaves a promotion to
-- create them (engine's lockDueSlots). At READ COMMITTED it locks no gap.
SELECT name FROM sluice_semaphores WHERE name IN (:keys) FOR UPDATE NOWAIT;

-- name: CreateMigrationsTable
CREATE TABLE IF NOT EXISTS sluice_migrations (
  version INT NOT NULL PRIMARY KEY,
  name VARCHAR(255) NOT NULL,
  applied_at BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- name: LockMigrations
-- name: UnlockMigrations
-- DDL commits implicitly on MySQL, so neither a migration's transaction
-- nor a lock row can serialize migrators: a named lock does, which the
-- migrator's connection holds for its whole run.

-- fragment: MigrationLockName
-- The lock is the database's, not the server's, so that migrators of
-- other databases on the server run beside it: a name of at most 64
-- characters (MySQL's limit; a database's name alone may take 64) made
-- from a hash of the database's name.
CONCAT('sluice_migrations.', LEFT(SHA2(COALESCE(DATABASE(), ''), 256), 40))

-- name: TakeMigrationLock
SELECT GET_LOCK({MigrationLockName}, :timeout);

-- name: ReleaseMigrationLock
SELECT RELEASE_LOCK({MigrationLockName});

-- name: CreateMigrationProgressTable
-- How many statements of the migration being applied (direction "up") or
-- reverted ("down") have run: each commits as it runs, so a migration
-- that fails part way resumes after them.
CREATE TABLE IF NOT EXISTS sluice_migration_progress (
  version INT NOT NULL PRIMARY KEY,
  direction VARCHAR(4) NOT NULL,
  statements INT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- name: MigrationProgress
SELECT version, direction, statements FROM sluice_migration_progress;

-- name: SaveMigrationProgress
INSERT INTO sluice_migration_progress (version, direction, statements) VALUES (:version, :direction, :statements)
ON DUPLICATE KEY UPDATE direction = VALUES(direction), statements = VALUES(statements);

-- name: ClearMigrationProgress
DELETE FROM sluice_migration_progress WHERE version = :version;
`

// Now reads SYSDATE(6): the time now, not at the statement's start.
func (Dialect) Now() string {
	return `SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)`
}

// SetJobs applies transitions by joining a derived table of their values
// (MariaDB has no VALUES ROW, MySQL no bare VALUES in a derived table).
func (Dialect) SetJobs(from engine.State, processID, now int64, rows []engine.SetRow) (string, []any) {
	args := make([]any, 0, len(rows)*10+3)
	for _, r := range rows {
		args = append(args, r.ID, string(r.State), r.RunAt, r.WaitKey, r.Error, r.AttemptDelta, r.FinishedAt, r.Deferral, now, r.Claim)
	}
	args = append(args, string(from), processID, processID)
	return `UPDATE sluice_jobs j JOIN (
  SELECT ? AS id, ? AS new_state, ? AS new_run_at, ? AS new_wait_key, ? AS new_error, ? AS attempt_delta, ? AS new_finished_at,
    ? AS deferral, ? AS deferral_at, ? AS run_claim` +
		strings.Repeat("\n  UNION ALL SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?", len(rows)-1) + `) v ON j.id = v.id
SET ` + engine.SetJobsAssignments + `
WHERE ` + engine.SetJobsCondition("?", "?", "?"), args
}
