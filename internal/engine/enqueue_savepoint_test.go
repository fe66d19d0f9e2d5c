package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// savepointStmts keeps the savepoint statements of stmts (set, rolled
// back to, released), each as its verb.
func savepointStmts(stmts []string) []string {
	var out []string
	for _, q := range stmts {
		switch {
		case strings.HasPrefix(q, "SAVEPOINT sluice_mark"):
			out = append(out, "savepoint")
		case strings.HasPrefix(q, "ROLLBACK TO SAVEPOINT sluice_mark"):
			out = append(out, "rollback to")
		case strings.HasPrefix(q, "RELEASE SAVEPOINT sluice_mark"):
			out = append(out, "release")
		}
	}
	return out
}

// An enqueue of coalescing, concurrency-limited and fair jobs in the
// caller's transaction runs under a savepoint, so that a failure leaves
// none of them there (TestEnqueueManyTxOfLimitedJobsUndoesTheirKeysWhenOneIsRefused);
// nowhere else does it cost a statement: not in a transaction of the
// store's own (Enqueue without one, EnqueueOpen: a failure rolls it back
// whole), and not under a mark the caller undoes on failure
// (EnqueueUnder: enqueue middleware's savepoint).
func TestAnEnqueueSetsASavepointOnlyWhereItIsNeeded(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		s, rec := testdb.Record(base)
		batch := func(team string) []engine.NewJob {
			co := job("co", "default", 0)
			co.Coalesce = &engine.Coalesce{Key: "co/" + team, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard}}
			return []engine.NewJob{co, concJob("acct/"+team, 1, 0), fairJob(team, 1), job("plain", "default", 0)}
		}

		_, err := s.Enqueue(ctx, nil, engine.At(t0), batch("a"))
		require.NoError(t, err)
		rec.Take()
		_, err = s.Enqueue(ctx, nil, engine.At(t0), batch("b"))
		require.NoError(t, err)
		require.Empty(t, savepointStmts(rec.Take()), "the store's own transaction")

		tx, _, err := s.EnqueueOpen(ctx, ctx, engine.At(t0), batch("c"))
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Empty(t, savepointStmts(rec.Take()), "EnqueueOpen's transaction, the store's own")

		caller, err := s.DB().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = caller.Rollback(ctx) }()
		_, err = s.Enqueue(ctx, caller, engine.At(t0), batch("d"))
		require.NoError(t, err)
		require.Equal(t, []string{"savepoint", "release"}, savepointStmts(rec.Take()), "the caller's transaction")

		m, err := s.MarkTx(ctx, caller)
		require.NoError(t, err)
		_, err = s.EnqueueUnder(ctx, m, engine.At(t0), batch("e"))
		require.NoError(t, err)
		require.NoError(t, m.Keep(ctx))
		require.Equal(t, []string{"savepoint", "release"}, savepointStmts(rec.Take()), "under the caller's mark: the mark's statements only")
		require.NoError(t, caller.Commit(ctx))
	})
}
