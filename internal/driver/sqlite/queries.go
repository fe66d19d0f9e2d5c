package sqlite

import (
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/sqlgen"
)

// What SQLite spells its own way. Everything else is the engine's catalog
// (internal/engine/sql), rendered with "?" placeholders and integer
// booleans, and without row locks: every transaction takes the only
// write lock at once (BEGIN IMMEDIATE).

// Capabilities: RETURNING; no arrays, no row locks, booleans as integers.
func (Dialect) Capabilities() engine.Capabilities {
	return engine.Capabilities{Returning: true, MaxInsertBatch: 1000}
}

// Replacements take no migration lock: BEGIN IMMEDIATE already serializes
// migrators; keys sort bytewise already (BINARY).
func (Dialect) Replacements() string {
	return `
-- name: LockMigrations
-- name: UnlockMigrations
-- fragment: Bytewise
`
}

// Now is empty: SQLite runs in this process, on the host's clock.
func (Dialect) Now() string { return "" }

// SetJobs applies transitions through a VALUES list.
func (Dialect) SetJobs(from engine.State, processID, now int64, rows []engine.SetRow) (string, []any) {
	args := make([]any, 0, len(rows)*10+3)
	for _, r := range rows {
		args = append(args, r.ID, string(r.State), r.RunAt, r.WaitKey, r.Error, r.AttemptDelta, r.FinishedAt, r.Deferral, now, r.Claim)
	}
	args = append(args, string(from), processID, processID)
	return `WITH v(` + engine.SetJobsColumns + `) AS (VALUES ` +
		sqlgen.Tuples(len(rows), "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)") + `)
UPDATE sluice_jobs AS j SET
  ` + engine.SetJobsAssignments + `
FROM v WHERE j.id = v.id AND ` + engine.SetJobsCondition("?", "?", "?"), args
}
