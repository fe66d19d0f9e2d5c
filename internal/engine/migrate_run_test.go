package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A run takes the migration lock once, whatever it applies: on PostgreSQL
// each migration's transaction took it (and let it go) in turn, so
// another migrator could slip in between two migrations of one run.
func TestAMigrationRunTakesTheLockOnce(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s, rec := testdb.Record(testdb.Opener(t, b.URL(t))())
			lock := s.SQL().LockMigrations()
			if s.SQL().SessionLock() {
				lock, _ = s.SQL().TakeMigrationLock(60)
			}
			if lock == "" {
				t.Skipf("%s: every transaction takes the write lock (BEGIN IMMEDIATE)", b.Name)
			}
			done, err := s.MigrateUp(ctx, 0)
			require.NoError(t, err)
			require.Greater(t, len(done), 1)
			taken := 0
			for _, q := range rec.Take() {
				if q == lock {
					taken++
				}
			}
			require.Equal(t, 1, taken, "a run of %d migrations took the lock %d times", len(done), taken)
		})
	}
}

// `migrate down N` takes the database back N migrations from where it
// found it: `down 1` and `down 2` queued together end two below the
// newest, whichever takes the lock first.
func TestDownOneAndDownTwoAtOnceEndTwoBelowTheNewest(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			open := testdb.Opener(t, b.URL(t))
			s := open()
			_, err := s.MigrateUp(ctx, 0)
			require.NoError(t, err)
			latest, err := s.LatestVersion()
			require.NoError(t, err)

			release, waiting := holdAnyMigrationLock(t, s)
			errs := make(chan error, 2)
			one, two := open(), open()
			go func() { _, err := one.MigrateDown(ctx, 1); errs <- err }()
			waitFor(t, "down 1 to wait for the lock", func() bool { return waiting() >= 1 })
			go func() { _, err := two.MigrateDown(ctx, 2); errs <- err }()
			waitFor(t, "down 2 to wait for the lock", func() bool { return waiting() >= 2 })
			release()
			require.NoError(t, <-errs)
			require.NoError(t, <-errs)
			applied := appliedVersions(t, s)
			require.Equal(t, latest-2, applied[len(applied)-1], "applied: %v", applied)
		})
	}
}

// A database a newer sluice migrated: this one's `migrate up`, with
// nothing of its own pending, succeeds and applies nothing (a rolling
// deploy's old replicas still boot); with migrations of its own pending
// below the newer one, it refuses to apply them under it; `migrate down`
// refuses, naming the version, and reverts nothing.
func TestMigratingADatabaseOfANewerVersion(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		latest, err := s.LatestVersion()
		require.NoError(t, err)
		newer, err := s.NewerMigrations(ctx)
		require.NoError(t, err)
		require.Empty(t, newer)
		q, args := s.SQL().RecordMigration(latest+1, "from_the_future", engine.Micros(t0))
		_, err = s.DB().Exec(ctx, q, args...)
		require.NoError(t, err)

		newer, err = s.NewerMigrations(ctx)
		require.NoError(t, err)
		require.Equal(t, []int{latest + 1}, newer)
		done, err := s.MigrateUp(ctx, 0)
		require.NoError(t, err)
		require.Empty(t, done)

		_, err = s.MigrateDown(ctx, 1)
		require.ErrorIs(t, err, engine.ErrNewerMigrations)
		require.ErrorContains(t, err, fmt.Sprintf("migration %03d is applied", latest+1))
		require.Contains(t, appliedVersions(t, s), latest)

		// Forget the newest known one by hand: up would apply it under
		// the newer one.
		q, args = s.SQL().ForgetMigration(latest)
		_, err = s.DB().Exec(ctx, q, args...)
		require.NoError(t, err)
		done, err = s.MigrateUp(ctx, 0)
		require.ErrorIs(t, err, engine.ErrNewerMigrations)
		require.ErrorContains(t, err, fmt.Sprintf("%03d_", latest))
		require.Empty(t, done)
		require.NotContains(t, appliedVersions(t, s), latest)
	})
}

// Where the run's transaction holds the lock (PostgreSQL, SQLite), each
// migration runs in a savepoint of it: one that fails is undone whole,
// and those the run applied before it stay applied.
func TestAFailedMigrationKeepsThoseTheRunAppliedBeforeIt(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			s := testdb.Opener(t, b.URL(t))()
			_, err := s.MigrateUp(ctx, 10)
			require.NoError(t, err)
			// Something in the way of migration 012.
			_, err = s.DB().Exec(ctx, "CREATE TABLE sluice_attempts (x INT)")
			require.NoError(t, err)
			done, err := s.MigrateUp(ctx, 0)
			require.ErrorContains(t, err, "012_attempts")
			require.Len(t, done, 1)
			require.Equal(t, 11, done[0].Version)
			applied := appliedVersions(t, s)
			require.Equal(t, 11, applied[len(applied)-1], "applied: %v", applied)
			st, err := s.MigrationStatus(ctx)
			require.NoError(t, err)
			require.Equal(t, "pending", st[11].State())
		})
	}
}
