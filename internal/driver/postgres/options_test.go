package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// postgresBackend returns the run's PostgreSQL backend, or skips.
func postgresBackend(t *testing.T) testdb.Backend {
	b, ok := testdb.Named(t, "postgres")
	if !ok {
		t.Skip("no PostgreSQL: set SLUICE_TEST_POSTGRES_URL")
	}
	return b
}

// A PostgreSQL-compatible engine without LISTEN/NOTIFY or advisory locks
// (CockroachDB, YugabyteDB) migrates, enqueues, claims, promotes and
// finishes with both left out, and no statement uses them.
func TestWithoutNotificationsOrAdvisoryLocks(t *testing.T) {
	ctx := context.Background()
	raw := postgresBackend(t).OpenRaw(t)
	s, rec := testdb.Record(engine.New(postgres.Dialect{NoNotify: true, NoAdvisoryLock: true}, raw.DB()))
	require.False(t, s.SQL().Notifies())
	q, _ := s.SQL().Notify([]string{"default"})
	require.Empty(t, q)

	// Concurrent migrators serialize on the lock row: each migration runs
	// once, and none fails on another's half-made schema. (The first makes
	// the migrations table alone: CREATE TABLE IF NOT EXISTS is not safe
	// against itself on PostgreSQL, lock or no lock.)
	first, err := s.MigrateUp(ctx, 1)
	require.NoError(t, err)
	require.Len(t, first, 1)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	ran := make([]int, 4)
	for i := range errs {
		wg.Go(func() {
			done, err := s.MigrateUp(ctx, 0)
			errs[i], ran[i] = err, len(done)
		})
	}
	wg.Wait()
	total := len(first)
	for i, err := range errs {
		require.NoError(t, err, "migrator %d", i)
		total += ran[i]
	}
	// Versions may have gaps (a number kept for a change on another
	// branch): count the migrations, not the latest version.
	ms, err := s.Migrations()
	require.NoError(t, err)
	require.Equal(t, len(ms), total, "each migration ran once")
	require.NoError(t, s.CheckSchema(ctx))
	// Down and up again, under the same lock; the lock row never stays.
	down, err := s.MigrateDown(ctx, len(ms))
	require.NoError(t, err)
	require.Len(t, down, len(ms))
	_, err = s.MigrateUp(ctx, 0)
	require.NoError(t, err)
	status, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	for _, m := range status {
		require.True(t, m.Applied, "migration %03d", m.Version)
	}
	var lockRows int
	rows, err := s.DB().Query(ctx, `SELECT count(*) FROM sluice_migrations WHERE version = 0`)
	require.NoError(t, err)
	for rows.Next() {
		require.NoError(t, rows.Scan(&lockRows))
	}
	rows.Close()
	require.Zero(t, lockRows)

	// Enqueue (plain, scheduled, coalescing), promote, claim, finish.
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	wake, stop := s.Subscribe([]string{"default"}, nil)
	defer stop()
	jobs := []engine.NewJob{
		{Kind: "a", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3},
		{Kind: "a", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3, RunAt: now.Add(time.Minute)},
		{Kind: "c", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3, Coalesce: &engine.Coalesce{Key: "c/1", Rule: coalesce.Spec{Scope: "c"}}},
		{Kind: "c", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3, Coalesce: &engine.Coalesce{Key: "c/1", Rule: coalesce.Spec{Scope: "c"}}},
	}
	res, err := s.Enqueue(ctx, nil, engine.At(now), jobs)
	require.NoError(t, err)
	require.Len(t, res, 4)
	require.True(t, res[3].Joined, "the second coalescing call joins the first")
	promoted, _, err := s.Promote(ctx, engine.At(now.Add(2*time.Minute)), 100)
	require.NoError(t, err)
	require.Equal(t, 1, promoted)
	select {
	case <-wake: // this process's workers are still woken, in process
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up from the promotion")
	}
	pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "test", PID: 1}, engine.At(now))
	require.NoError(t, err)
	claimed, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 10, Clock: engine.At(now.Add(2 * time.Minute))})
	require.NoError(t, err)
	require.Len(t, claimed.Jobs, 3)
	var done []int64
	var runs []engine.Run
	for _, j := range claimed.Jobs {
		done = append(done, j.ID)
		runs = append(runs, j.Run())
	}
	require.NoError(t, s.Finish(ctx, pid, engine.At(now.Add(3*time.Minute)), engine.Outcomes{Completed: runs}))
	for _, id := range done {
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, engine.StateCompleted, j.State)
	}

	for _, q := range rec.Take() {
		require.NotContains(t, q, "pg_notify")
		require.NotContains(t, q, "pg_advisory")
		require.False(t, strings.HasPrefix(q, "LISTEN"), q)
	}
}

// By default PostgreSQL's enqueues notify and its migrators take an
// advisory lock.
func TestNotificationsAndAdvisoryLocksByDefault(t *testing.T) {
	ctx := context.Background()
	raw := postgresBackend(t).OpenRaw(t)
	s, rec := testdb.Record(engine.New(postgres.Dialect{}, raw.DB()))
	require.True(t, s.SQL().Notifies())
	_, err := s.MigrateUp(ctx, 0)
	require.NoError(t, err)
	_, err = s.Enqueue(ctx, nil, engine.At(time.Now()), []engine.NewJob{{Kind: "a", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3}})
	require.NoError(t, err)
	all := strings.Join(rec.Take(), "\n")
	require.Contains(t, all, "pg_advisory_xact_lock")
	require.Contains(t, all, "pg_notify")
	require.NotContains(t, all, "WHERE version = 0")
}
