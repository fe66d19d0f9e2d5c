package jobs_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
	"github.com/sluicequeue/sluice/store/dburl"
)

// openReadOnly opens a store on the database at u whose sessions take no
// writes: PostgreSQL with default_transaction_read_only (as a hot
// standby or a role set read-only), MySQL and MariaDB with the session's
// transaction_read_only (tx_read_only before MariaDB 11.1), SQLite with
// the file opened read-only (mode=ro, as a file the process may only
// read).
func openReadOnly(t *testing.T, name, u string) *store.Store {
	t.Helper()
	ctx := context.Background()
	var s *store.Store
	var err error
	switch name {
	case "postgres":
		s, err = store.Open(ctx, u+"&options=-c%20default_transaction_read_only%3Don")
	case "mysql":
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		for _, v := range []string{"transaction_read_only", "tx_read_only"} {
			if s, err = store.Open(ctx, u+sep+v+"=1"); err == nil || !strings.Contains(err.Error(), "Unknown system variable") {
				break
			}
		}
	default:
		path, ok := dburl.SQLitePath(u)
		require.True(t, ok, u)
		dsn, derr := store.SQLiteDSN(path)
		require.NoError(t, derr)
		db, derr := sql.Open("sqlite", dsn+"&mode=ro")
		require.NoError(t, derr)
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { _ = db.Close() })
		s, err = store.OpenSQLiteDB(ctx, db)
	}
	require.NoError(t, err, "a read-only store opens: reads (sluice ui --read-only, inspect) work there")
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// docs/operations.md, "When the database goes away": a database that
// takes no writes (a standby, a failed-over old primary, a read-only
// session or file) opens, for reads, and the first write fails with an
// error that says the database is read-only: migrate up, an enqueue, and
// a worker's or a dispatcher's Run, which returns it at once rather than
// logging failed claims for ever.
func TestAReadOnlyDatabaseFailsTheFirstWriteSayingSo(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			u := b.URL(t)
			rw := testdb.Opener(t, u)() // makes the database (the SQLite file)
			readOnly := func(t *testing.T, err error) {
				t.Helper()
				require.Error(t, err)
				require.Regexp(t, `(?i)read.?only`, err.Error())
			}
			_, err := openReadOnly(t, b.Name, u).MigrateUp(ctx, 0)
			readOnly(t, err)
			_, err = rw.MigrateUp(ctx, 0)
			require.NoError(t, err)

			s := openReadOnly(t, b.Name, u)
			require.NoError(t, s.CheckSchema(ctx), "reads work")
			reg := jobs.NewRegistry()
			require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[noop]) error { return nil }))
			_, err = jobs.NewClient(s, reg, jobs.ClientConfig{}).Enqueue(ctx, noop{N: 1})
			readOnly(t, err)
			w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Logger: quiet()})
			require.NoError(t, err)
			runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			readOnly(t, w.Run(runCtx))
			d, err := dispatcher.New(s, dispatcher.Config{Logger: quiet()})
			require.NoError(t, err)
			readOnly(t, d.Run(runCtx))
			require.NoError(t, runCtx.Err(), "Run returned at once")
		})
	}
}
