package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// countCoalesceKeys counts the rows of sluice_coalesce_keys.
func countCoalesceKeys(t *testing.T, s *engine.Store) int {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "SELECT count(*) FROM sluice_coalesce_keys")
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	require.True(t, rows.Next())
	require.NoError(t, rows.Scan(&n))
	return n
}

// Each coalescing call locks its key's row, created on first use, which
// points to the key's pending job. The hourly clean-up deletes, in batches
// and skipping the rows a call holds, the rows whose job released its key
// (claimed or cancelled), and keeps those of pending jobs, through which
// the next call finds its job; a call of a deleted key creates its row
// again, and a new job.
func TestCoalesceKeyRowsOfReleasedJobsAreCleared(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		call := func(key string) engine.NewJob {
			j := job("k", "default", 0)
			j.Coalesce = &engine.Coalesce{Key: key, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard}}
			return j
		}
		first := enqueue(t, s, t0, call("co/a"), call("co/b"), call("co/c"), call("co/a"), call("co/d"))
		require.Equal(t, first[0], first[3], "the second call of co/a joined the first")
		require.Equal(t, 4, countCoalesceKeys(t, s))
		n, err := s.ClearCoalesceKeys(ctx, 2, time.Millisecond)
		require.NoError(t, err)
		require.Zero(t, n, "every row points to a pending job")

		pid := register(t, s, t0)
		require.Equal(t, []int64{first[0], first[1], first[2]}, ids(claim(t, s, pid, t0, 3).Jobs))
		_, err = s.CancelJobs(ctx, engine.At(t0), []int64{first[4]}, "")
		require.NoError(t, err)
		// co/b's next call, in a caller's transaction still open, holds
		// its row: the clean-up skips it without waiting.
		if s.Dialect().Capabilities().RowLocks {
			other := open()
			tx, err := other.DB().Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = other.Enqueue(ctx, tx, engine.At(t0), []engine.NewJob{call("co/b")})
			require.NoError(t, err)
			n, err = s.ClearCoalesceKeys(ctx, 2, time.Millisecond)
			require.NoError(t, err)
			require.Equal(t, 3, n, "co/a, co/c and co/d released their keys; co/b is held")
			require.NoError(t, tx.Commit(ctx))
		} else {
			n, err = s.ClearCoalesceKeys(ctx, 2, time.Millisecond)
			require.NoError(t, err)
			require.Equal(t, 4, n)
		}

		again := enqueue(t, s, t0, call("co/a"), call("co/b"))
		require.NotContains(t, first, again[0], "co/a's call made a new job")
		b := again[1]
		if s.Dialect().Capabilities().RowLocks {
			require.Equal(t, engine.StateReady, state(t, s, b).State)
		}
		require.Equal(t, 2, countCoalesceKeys(t, s))
		n, err = s.ClearCoalesceKeys(ctx, 0, time.Millisecond)
		require.NoError(t, err)
		require.Zero(t, n, "both rows point to pending jobs")
		require.Equal(t, b, enqueue(t, s, t0, call("co/b"))[0], "a call after the clean-up joins the pending job")
	})
}
