package engine_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/operations.md: a migrator "waits for the lock as long as its
// context lets it". On PostgreSQL the lock is an advisory lock taken in
// the run's transaction, and a lock_timeout the role or the database sets
// cut that wait short: a migrator queued behind another's run failed with
// "lock migrations: … lock timeout (SQLSTATE 55P03)". It now asks again
// until its context ends.
func TestAMigratorOutwaitsTheRolesLockTimeoutOnPostgres(t *testing.T) {
	b, ok := testdb.Named(t, "postgres")
	if !ok {
		t.Skip("no PostgreSQL: set SLUICE_TEST_POSTGRES_URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u := b.URL(t) + "&options=-c%20lock_timeout%3D20ms"
	open := testdb.Opener(t, u)
	holder := open()
	s, rec := testdb.Record(open())
	var locks atomic.Int32
	rec.Before = func(q string) {
		if strings.Contains(q, "pg_advisory_xact_lock") {
			locks.Add(1)
		}
	}

	// Another migrator's run holds the lock.
	tx, err := holder.DB().Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock(7251002)")
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := s.MigrateUp(ctx, 0)
		done <- err
	}()
	// Three asks: the first two waits were cut short by lock_timeout.
	for locks.Load() < 3 {
		select {
		case err := <-done:
			_ = tx.Rollback(ctx)
			t.Fatalf("the migrator returned while the lock was held: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.NoError(t, tx.Rollback(ctx), "the other run ends")
	require.NoError(t, <-done, "the migrator took the lock once it was free, and migrated")
	require.NoError(t, s.CheckSchema(ctx))

	// A context that ends while the lock is held ends the wait, saying so.
	tx, err = holder.DB().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT pg_advisory_xact_lock(7251002)")
	require.NoError(t, err)
	fresh := testdb.Opener(t, b.URL(t)+"&options=-c%20lock_timeout%3D20ms")()
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	_, err = fresh.MigrateUp(short, 0)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "lock migrations")
}
