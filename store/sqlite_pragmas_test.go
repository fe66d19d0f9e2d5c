package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/store"
)

// guarantees.md, "Durability per database": "SQLite runs in WAL mode with
// synchronous=FULL by default, so a committed job survives a power loss;
// sqlite:PATH?synchronous=normal is about 30% faster". Each URL form's
// settings are read back from the store's own pool, outside and inside
// one of its transactions (where its writes run). No test read them back
// before: a DSN that lost its pragmas passed every test.
func TestSQLiteRunsInWALWithSynchronousFullByDefault(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		url  string
		sync int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{
		{filepath.Join(dir, "a.db"), 2},
		{"sqlite:" + filepath.Join(dir, "b.db"), 2},
		{"sqlite:" + filepath.Join(dir, "c.db") + "?synchronous=full", 2},
		{"sqlite:" + filepath.Join(dir, "d.db") + "?synchronous=normal", 1},
		{"sqlite://" + filepath.Join(dir, "e.db") + "?synchronous=NORMAL", 1},
	} {
		t.Run(c.url, func(t *testing.T) {
			ctx := context.Background()
			s, err := store.Open(ctx, c.url)
			require.NoError(t, err)
			defer s.Close()
			_, err = s.MigrateUp(ctx, 0)
			require.NoError(t, err)
			db := engine.From(s).DB()
			for range 2 {
				var mode string
				var sync int
				readOne(t, db, "PRAGMA journal_mode", &mode)
				readOne(t, db, "PRAGMA synchronous", &sync)
				require.Equal(t, "wal", mode)
				require.Equal(t, c.sync, sync)
				// A transaction, as the store's writes run in.
				tx, err := db.Begin(ctx)
				require.NoError(t, err)
				rows, err := tx.Query(ctx, "PRAGMA synchronous")
				require.NoError(t, err)
				require.True(t, rows.Next())
				require.NoError(t, rows.Scan(&sync))
				rows.Close()
				require.NoError(t, tx.Rollback(ctx))
				require.Equal(t, c.sync, sync, "in a transaction")
			}
		})
	}
}

func readOne(t *testing.T, db engine.Executor, q string, dest any) {
	t.Helper()
	rows, err := db.Query(context.Background(), q)
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rows.Next())
	require.NoError(t, rows.Scan(dest))
	require.NoError(t, rows.Err())
}
