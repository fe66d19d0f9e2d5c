// Package store opens the database sluice keeps its jobs in, and migrates
// it. It is all an application touches of the storage: open a *Store by
// URL, migrate it, and hand it to jobs.NewClient, jobs.NewWorker and
// dispatcher.New. The engine behind it (claims, budgets, semaphores,
// coalescing, recovery) and the per-database drivers are internal.
package store

import (
	"context"

	"github.com/sluicequeue/sluice/internal/engine"
)

func init() {
	engine.Install(func(s any) *engine.Store {
		if st, ok := s.(*Store); ok && st != nil {
			return st.e
		}
		return nil
	}, func(e *engine.Store) any { return &Store{e: e} })
}

// Store is an open database: PostgreSQL, MySQL/MariaDB or SQLite. It is
// safe for concurrent use; close it when done.
type Store struct {
	e *engine.Store
}

// ErrPendingMigrations is returned by enqueues and by a worker's start when
// the database's schema is missing or older than this build of sluice.
var ErrPendingMigrations = engine.ErrPendingMigrations

// ErrMigrationLocked is returned by MigrateUp and MigrateDown on MySQL when
// another migrator held the database's migration lock for the whole wait
// (a minute): they applied and reverted nothing. Run them again when the
// other is done.
var ErrMigrationLocked = engine.ErrMigrationLocked

// ErrNewerMigrations is returned by MigrateDown, and by MigrateUp when it
// has migrations to apply, while the database records a migration newer
// than this build knows, applied or, on MySQL, under way after failing
// part way (a newer sluice migrated it): they applied and reverted
// nothing.
var ErrNewerMigrations = engine.ErrNewerMigrations

// Migration is one numbered schema change: its version, name, and the SQL
// that applies and reverts it.
type Migration = engine.Migration

// MigrationStatus is a migration and whether the database has it, or,
// on MySQL, how far it got where it failed part way (Partly).
type MigrationStatus = engine.MigrationStatus

// Progress is how many statements of a migration that failed part way
// have run (MySQL, whose DDL commits at once).
type Progress = engine.Progress

// Backend names the database the store is on: "postgres", "mysql" (MySQL
// or MariaDB) or "sqlite".
func (s *Store) Backend() string { return s.e.Dialect().Name() }

// Close closes the store's connections.
func (s *Store) Close() error { return s.e.Close() }

// MigrateUp applies the pending migrations up to version target (0: all)
// and returns those it applied. Several processes may run it at once: one
// applies while the others wait (on MySQL, a minute at most; then they
// fail with ErrMigrationLocked), and each chooses what to apply once it
// holds the lock. On MySQL, whose DDL commits at once, a migration that
// failed part way resumes after the statements that ran.
func (s *Store) MigrateUp(ctx context.Context, target int) ([]Migration, error) {
	return s.e.MigrateUp(ctx, target)
}

// MigrateDown reverts the last steps applied migrations and returns them.
// What it reverts is chosen once it holds the migration lock: at most
// steps migrations, newest first, and none at or below the one that was
// steps below the newest when it was called, so that two run at once
// revert the newest steps once. It reverts nothing (ErrNewerMigrations)
// while the database records a migration newer than this build knows.
func (s *Store) MigrateDown(ctx context.Context, steps int) ([]Migration, error) {
	return s.e.MigrateDown(ctx, steps)
}

// MigrationStatus lists every migration this build knows and whether the
// database has it.
func (s *Store) MigrationStatus(ctx context.Context) ([]MigrationStatus, error) {
	return s.e.MigrationStatus(ctx)
}

// NewerMigrations returns the versions the database records as applied,
// or on MySQL as under way (applied or reverted part way), that are newer
// than every migration this build knows: a newer sluice migrated the
// database. MigrateDown refuses to revert anything while there are any.
func (s *Store) NewerMigrations(ctx context.Context) ([]int, error) { return s.e.NewerMigrations(ctx) }

// CheckSchema returns ErrPendingMigrations unless the database has every
// migration this build knows.
func (s *Store) CheckSchema(ctx context.Context) error { return s.e.CheckSchema(ctx) }
