package jobs_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
	"github.com/sluicequeue/sluice/store/dburl"
)

// appPool is a pool an app opened itself, before sluice: the store is
// opened on it, and the app begins its own transactions on it.
type appPool struct {
	store *store.Store
	// begin starts a transaction of the app's own on the pool.
	begin func(t *testing.T) (tx any, commit, rollback func())
	// alive checks the pool still works.
	alive func() error
}

// openAppPool opens a pool on a fresh database the way an app would, and
// a store on it with store.OpenPostgresPool, OpenMySQLDB or OpenSQLiteDB.
func openAppPool(t *testing.T, b testdb.Backend) appPool {
	ctx := context.Background()
	url := b.URL(t)
	switch b.Name {
	case "postgres":
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := store.OpenPostgresPool(ctx, pool)
		require.NoError(t, err)
		return appPool{store: s, alive: func() error { return pool.Ping(ctx) }, begin: func(t *testing.T) (any, func(), func()) {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			return tx, func() { require.NoError(t, tx.Commit(ctx)) }, func() { require.NoError(t, tx.Rollback(ctx)) }
		}}
	case "mysql":
		cfg, err := mysql.Config(url)
		require.NoError(t, err)
		// The app's own DSN: REPEATABLE READ sessions, as MySQL defaults.
		db, err := sql.Open("mysql", cfg.FormatDSN())
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		s, err := store.OpenMySQLDB(ctx, db)
		require.NoError(t, err)
		return sqlPool(s, db)
	default:
		path, ok := dburl.SQLitePath(url)
		require.True(t, ok, url)
		dsn, err := store.SQLiteDSN(path)
		require.NoError(t, err)
		db, err := sql.Open("sqlite", dsn)
		require.NoError(t, err)
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { _ = db.Close() })
		s, err := store.OpenSQLiteDB(ctx, db)
		require.NoError(t, err)
		return sqlPool(s, db)
	}
}

func sqlPool(s *store.Store, db *sql.DB) appPool {
	ctx := context.Background()
	return appPool{store: s, alive: func() error { return db.PingContext(ctx) }, begin: func(t *testing.T) (any, func(), func()) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		return tx, func() { require.NoError(t, tx.Commit()) }, func() { require.NoError(t, tx.Rollback()) }
	}}
}

// A store opened on the app's pool enqueues in the app's transactions on
// that pool (committed with them, gone with a rollback), runs a worker,
// and leaves the pool open when it closes.
func TestStoreOnTheAppsOwnPool(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			p := openAppPool(t, b)
			s := p.store
			_, err := s.MigrateUp(ctx, 0)
			require.NoError(t, err)

			reg := jobs.NewRegistry()
			ran := 0
			require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[appEmail]) error { ran++; return nil }))
			c := jobs.NewClient(s, reg, jobs.ClientConfig{})

			tx, commit, _ := p.begin(t)
			kept, err := c.EnqueueTx(ctx, tx, appEmail{To: "kept"})
			require.NoError(t, err)
			commit()
			tx, _, rollback := p.begin(t)
			_, err = c.EnqueueTx(ctx, tx, appEmail{To: "rolled back"})
			require.NoError(t, err)
			rollback()

			list, err := engine.From(s).ListJobs(ctx, engine.JobFilter{Limit: 10})
			require.NoError(t, err)
			require.Len(t, list, 1, "the rolled-back enqueue left no job")
			require.Equal(t, kept.ID, list[0].ID)

			w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			require.NoError(t, err)
			res, err := w.Drain(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, res.Completed)
			require.Equal(t, 1, ran)

			require.NoError(t, s.Close())
			require.NoError(t, p.alive(), "Store.Close leaves the app's pool open")
		})
	}
}

// A nil transaction, typed or not, is named as such.
func TestEnqueueTxWithANilTransactionSaysSo(t *testing.T) {
	testdb.EachPublic(t, func(t *testing.T, s *store.Store) {
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Declare[appEmail](reg))
		c := jobs.NewClient(s, reg, jobs.ClientConfig{})
		_, err := c.EnqueueTx(context.Background(), nil, appEmail{})
		require.EqualError(t, err, "jobs: EnqueueTx: the transaction is nil")
		_, err = c.EnqueueTx(context.Background(), (*sql.Tx)(nil), appEmail{})
		require.EqualError(t, err, "jobs: EnqueueTx: the transaction is a nil *sql.Tx; pass the one your Begin returned")
		_, err = c.EnqueueManyTx(context.Background(), (*pgxpool.Tx)(nil), []jobs.Item{{Args: appEmail{}}})
		require.ErrorContains(t, err, "the transaction is a nil *pgxpool.Tx")
	})
}

type appEmail struct{ To string }

func (appEmail) Kind() string { return "app_email" }
