package engine_test

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// lockWait is how long the tests' migrators wait for a migration lock
// another holds (MySQL's wait is a minute).
const lockWait = time.Second

// mysqlBackends returns the MySQL backend, which the run must have when
// CI is set (testdb.Backends fails the test without it), or none.
func mysqlBackends(t *testing.T) []testdb.Backend {
	t.Helper()
	var out []testdb.Backend
	for _, b := range testdb.Backends(t) {
		if b.Name == "mysql" {
			out = append(out, b)
		}
	}
	return out
}

// holdMigrationLock takes s's migration lock (MySQL's, which belongs to a
// connection) on a connection of its own, as a migrator in the middle of
// a run holds it, and returns what releases it (also run when the test
// ends). It fails the test unless the lock was free.
func holdMigrationLock(t *testing.T, s *engine.Store) func() {
	t.Helper()
	ctx := context.Background()
	require.True(t, s.SQL().SessionLock(), "%s has no session's migration lock", s.Dialect().Name())
	sess, err := s.DB().(engine.Sessioner).Session(ctx)
	require.NoError(t, err)
	q, args := s.SQL().TakeMigrationLock(0)
	rows, err := sess.Query(ctx, q, args...)
	require.NoError(t, err)
	require.True(t, rows.Next())
	var took sql.NullInt64
	require.NoError(t, rows.Scan(&took))
	rows.Close()
	if took.Int64 != 1 {
		_ = sess.Close()
		t.Fatalf("the migration lock is not free (GET_LOCK returned %v)", took)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			_, err := sess.Exec(ctx, s.SQL().ReleaseMigrationLock())
			require.NoError(t, err)
			require.NoError(t, sess.Close())
		})
	}
	t.Cleanup(release)
	return release
}

// A migration that fails must not leave the migration lock held: on
// MySQL, whose lock belongs to a connection and outlives a rollback, the
// failed migrator's pooled connection kept it, and another migrator (the
// next replica's `migrate up`) waited for it in vain.
func TestAFailedMigrationReleasesTheMigrationLock(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			open := testdb.Opener(t, b.URL(t))
			s := open()
			_, err := s.MigrateUp(ctx, 11)
			require.NoError(t, err)
			// Something in the way of migration 012.
			_, err = s.DB().Exec(ctx, "CREATE TABLE sluice_attempts (x INT)")
			require.NoError(t, err)
			_, err = s.MigrateUp(ctx, 0)
			require.ErrorContains(t, err, "012_attempts")

			other := open()
			other.MigrationLockWait = lockWait
			if other.SQL().SessionLock() {
				holdMigrationLock(t, other)()
			}
			_, err = other.DB().Exec(ctx, "DROP TABLE sluice_attempts")
			require.NoError(t, err)
			done, err := other.MigrateUp(ctx, 0)
			require.NoError(t, err, "another migrator, once the cause is removed")
			require.NotEmpty(t, done)
			require.Equal(t, 12, done[0].Version)
			require.NoError(t, other.CheckSchema(ctx))
		})
	}
}

// Migrators are serialized (scaling.md: "migrations it can apply one
// process at a time"): on MySQL by a named lock, which GET_LOCK reports
// it could not take by returning 0 when its wait runs out. A second
// migrator that cannot take it must fail, clearly, once (not once per
// migration), and apply nothing beside the first; one with nothing to do
// returns at once.
func TestAMySQLMigratorThatCannotTakeTheLockAppliesNothing(t *testing.T) {
	for _, b := range mysqlBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			open := testdb.Opener(t, b.URL(t))
			first := open()
			release := holdMigrationLock(t, first)

			second := open()
			second.MigrationLockWait = lockWait
			began := time.Now()
			done, err := second.MigrateUp(ctx, 0)
			took := time.Since(began)
			require.ErrorIs(t, err, engine.ErrMigrationLocked)
			require.ErrorContains(t, err, "another migrator holds the migration lock of this database; try again when it is done")
			require.Empty(t, done, "a migrator that never took the lock applied migrations while another held it")
			require.Less(t, took, 3*lockWait, "the second migrator waits for the lock once, not once per migration")
			st, err := second.MigrationStatus(ctx)
			require.NoError(t, err)
			require.Len(t, engine.Pending(st), len(st), "nothing is applied")

			release()
			_, err = second.MigrateUp(ctx, 0)
			require.NoError(t, err)
			release = holdMigrationLock(t, first)
			defer release()
			began = time.Now()
			done, err = second.MigrateUp(ctx, 0)
			require.NoError(t, err)
			require.Empty(t, done)
			require.Less(t, time.Since(began), lockWait, "a migrator with nothing to do does not wait for the lock")
		})
	}
}

// The migration lock is the database's, not the server's: a migrator of
// another database on the same server (another app, another tenant)
// does not wait for it. A database's name may be 64 characters, MySQL's
// limit for a lock's name too.
func TestMigratorsOfDifferentMySQLDatabasesDoNotWaitForEachOther(t *testing.T) {
	for _, b := range mysqlBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			busy := testdb.Opener(t, b.URL(t))()
			holdMigrationLock(t, busy)

			other := testdb.Opener(t, longNamedDatabase(t, b))()
			other.MigrationLockWait = lockWait
			done, err := other.MigrateUp(ctx, 0)
			require.NoError(t, err, "a migrator of another database on the server")
			all, err := other.Migrations()
			require.NoError(t, err)
			require.Len(t, done, len(all))
		})
	}
}

// longNamedDatabase creates an empty database whose name is 64 characters
// long on b's server, dropped when the test ends, and returns its URL.
func longNamedDatabase(t *testing.T, b testdb.Backend) string {
	t.Helper()
	ctx := context.Background()
	base := b.URL(t) // a fresh database of a unique name
	cfg, err := mysql.Config(base)
	require.NoError(t, err)
	name := cfg.DBName + "_" + strings.Repeat("l", 64-len(cfg.DBName)-1)
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.ExecContext(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name) })
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// docs/operations.md, Several migrators at once: "A migrator that finds
// nothing to do returns without waiting for the lock" (and "A database a
// newer sluice migrated": old replicas still boot while the newer one
// migrates). Here another migrator holds the lock in the middle of its
// run (PostgreSQL: the advisory lock in its transaction; SQLite: the
// write lock its BEGIN IMMEDIATE took; MySQL: the named lock) while a
// migrator with nothing to do runs migrate up.
func TestAMigratorWithNothingToDoDoesNotWaitForTheLockOnAnyDatabase(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		holder := open()
		switch {
		case holder.SQL().SessionLock():
			holdMigrationLock(t, holder)
		default:
			tx, err := holder.DB().Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			if q := holder.SQL().LockMigrations(); q != "" {
				_, err = tx.Exec(ctx, q)
			} else {
				// BEGIN IMMEDIATE holds the write lock; a migration's first
				// write makes sure of it.
				_, err = tx.Exec(ctx, "CREATE TABLE sluice_lock_holder (x INTEGER)")
			}
			require.NoError(t, err)
		}
		other := open()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		began := time.Now()
		done, err := other.MigrateUp(cctx, 0)
		require.NoError(t, err, "after %v", time.Since(began))
		require.Empty(t, done)
		require.Less(t, time.Since(began), 2*time.Second, "a migrator with nothing to do does not wait for the lock")
	})
}
