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

// On MySQL each coalescing call locks its key's row, created on first use;
// the hourly clean-up deletes the rows no call holds, in batches, and a
// later call of a deleted key creates its row again and still joins the
// key's pending job. Elsewhere calls never use the table and the clean-up
// reads nothing.
func TestCoalesceKeyRowsAreClearedAndCreatedAgain(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		call := func(key string) engine.NewJob {
			j := job("k", "default", 0)
			j.Coalesce = &engine.Coalesce{Key: key, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard}}
			return j
		}
		first := enqueue(t, s, t0, call("co/a"), call("co/b"), call("co/c"), call("co/a"))
		require.Equal(t, first[0], first[3], "the second call of co/a joined the first")
		mysql := s.Dialect().Capabilities().IndexLocks
		if !mysql {
			require.Zero(t, countCoalesceKeys(t, s))
			n, err := s.ClearCoalesceKeys(ctx, 2, time.Millisecond)
			require.NoError(t, err)
			require.Zero(t, n)
			return
		}
		require.Equal(t, 3, countCoalesceKeys(t, s))

		// A caller's transaction holds co/b's row: the clean-up skips it
		// without waiting, and deletes the others, two at a time.
		other := open()
		tx, err := other.DB().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = other.Enqueue(ctx, tx, engine.At(t0), []engine.NewJob{call("co/b")})
		require.NoError(t, err)
		n, err := s.ClearCoalesceKeys(ctx, 2, time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 1, countCoalesceKeys(t, s))

		again := enqueue(t, s, t0, call("co/a"), call("co/c"))
		require.Equal(t, []int64{first[0], first[2]}, again, "calls of cleared keys still join their pending jobs")
		require.Equal(t, 3, countCoalesceKeys(t, s))
		n, err = s.ClearCoalesceKeys(ctx, 0, time.Millisecond)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		require.Zero(t, countCoalesceKeys(t, s))
	})
}
