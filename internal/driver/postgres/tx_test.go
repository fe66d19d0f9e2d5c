package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// The store's own transactions send BEGIN with their first statement and
// COMMIT with their last pipeline. Whatever a transaction's first
// statement is, and wherever it fails, it commits all or nothing, and its
// connection goes back to the pool fit for the next.
func TestPipelinedTransactions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := postgresBackend(t).Open(t).DB()
	_, err := db.Exec(ctx, "CREATE TABLE tx_probe (id int PRIMARY KEY)")
	require.NoError(t, err)
	ids := func() []int {
		t.Helper()
		rows, err := db.Query(ctx, "SELECT id FROM tx_probe ORDER BY id")
		require.NoError(t, err)
		defer rows.Close()
		var out []int
		for rows.Next() {
			var id int
			require.NoError(t, rows.Scan(&id))
			out = append(out, id)
		}
		require.NoError(t, rows.Err())
		return out
	}
	begin := func() engine.Tx {
		t.Helper()
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		return tx
	}
	insert := func(id int) engine.Stmt {
		return engine.Stmt{SQL: "INSERT INTO tx_probe VALUES ($1)", Args: []any{id}}
	}

	// An Exec first, then the last statements with the commit.
	tx := begin()
	res, err := tx.Exec(ctx, "INSERT INTO tx_probe VALUES (1)")
	require.NoError(t, err)
	require.EqualValues(t, 1, res.RowsAffected, "the first Exec reports its rows, BEGIN or not")
	require.NoError(t, tx.(engine.CommitPipeliner).PipelineCommit(ctx, []engine.Stmt{insert(2)}, nil))
	require.NoError(t, tx.Commit(ctx), "after PipelineCommit, Commit has nothing to do")
	require.NoError(t, tx.Rollback(ctx), "nor has Rollback")
	require.Equal(t, []int{1, 2}, ids())

	// A statement that fails in the committing pipeline: nothing lands.
	for range 20 { // more than the pool's connections: none is left in a transaction
		tx = begin()
		err = tx.(engine.CommitPipeliner).PipelineCommit(ctx, []engine.Stmt{insert(3), insert(1)}, nil)
		require.ErrorContains(t, err, "duplicate key")
		require.NoError(t, tx.Rollback(ctx))
	}
	require.Equal(t, []int{1, 2}, ids())

	// A locking query first, its rows streamed from the batch that began
	// the transaction, then a write, then a rollback.
	tx = begin()
	rows, err := tx.Query(ctx, "SELECT id FROM tx_probe ORDER BY id FOR UPDATE")
	require.NoError(t, err)
	var got []int
	for rows.Next() {
		var id int
		require.NoError(t, rows.Scan(&id))
		got = append(got, id)
	}
	rows.Close()
	require.NoError(t, rows.Err())
	require.Equal(t, []int{1, 2}, got)
	res, err = tx.Exec(ctx, "DELETE FROM tx_probe")
	require.NoError(t, err)
	require.EqualValues(t, 2, res.RowsAffected)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, []int{1, 2}, ids())

	// A pipeline first, committed by Commit.
	tx = begin()
	var n int
	require.NoError(t, tx.(engine.Pipeliner).Pipeline(ctx, []engine.Stmt{insert(3), {SQL: "SELECT count(*) FROM tx_probe", Rows: true}},
		func(_ int, rows engine.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&n); err != nil {
					return err
				}
			}
			return nil
		}))
	require.Equal(t, 3, n, "the pipeline reads its own write")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, []int{1, 2, 3}, ids())

	// A failed statement first: the transaction is aborted, and a Commit
	// says so instead of reporting success.
	tx = begin()
	_, err = tx.Exec(ctx, "INSERT INTO tx_probe VALUES (1)")
	require.ErrorContains(t, err, "duplicate key")
	_, err = tx.Exec(ctx, "INSERT INTO tx_probe VALUES (4)")
	require.Error(t, err, "statements after a failure are refused")
	require.Error(t, tx.Commit(ctx), "an aborted transaction does not commit")
	require.Equal(t, []int{1, 2, 3}, ids())

	// A transaction that sent nothing commits and rolls back, and gives
	// its connection back: more of them than the pool holds do not wait.
	for range 20 {
		require.NoError(t, begin().Commit(ctx))
		require.NoError(t, begin().Rollback(ctx))
	}

	// A transaction whose context ends while it waits on a lock: it rolls
	// back, and the pool hands out working connections after it.
	holder := begin()
	_, err = holder.Exec(ctx, "SELECT id FROM tx_probe WHERE id = 1 FOR UPDATE")
	require.NoError(t, err)
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	tx = begin()
	_, err = tx.Exec(short, "UPDATE tx_probe SET id = 10 WHERE id = 1")
	stop()
	require.Error(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, holder.Rollback(ctx))
	for range 20 {
		tx = begin()
		require.NoError(t, tx.(engine.CommitPipeliner).PipelineCommit(ctx, []engine.Stmt{{SQL: "SELECT 1"}}, nil))
	}
	require.Equal(t, []int{1, 2, 3}, ids())
}
