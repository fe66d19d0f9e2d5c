package jobs_test

import (
	"context"
	"database/sql"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/driver/mysql"
	"github.com/sluicequeue/sluice/internal/faultnet"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

// openFenceable opens a store on an app's pool at u whose connections,
// made while fenced is set, take no writes: as when a failover's
// reconnections reach the old primary, fenced read-only, or a replica,
// before the database's name leads to the new primary.
func openFenceable(t *testing.T, name, u string, fenced *atomic.Bool) *store.Store {
	t.Helper()
	ctx := context.Background()
	var s *store.Store
	switch name {
	case "postgres":
		cfg, err := pgxpool.ParseConfig(u)
		require.NoError(t, err)
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if fenced.Load() {
				_, err := c.Exec(ctx, "SET default_transaction_read_only = on")
				return err
			}
			return nil
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err = store.OpenPostgresPool(ctx, pool)
		require.NoError(t, err)
	default:
		cfg, err := mysql.Config(u)
		require.NoError(t, err)
		// MySQL 8 and MariaDB 11.1 name it transaction_read_only,
		// MariaDB before 11.1 tx_read_only.
		variable := "transaction_read_only"
		probe, err := sql.Open("mysql", cfg.FormatDSN())
		require.NoError(t, err)
		if _, err := probe.ExecContext(ctx, "SELECT @@transaction_read_only"); err != nil {
			variable = "tx_read_only"
		}
		require.NoError(t, probe.Close())
		require.NoError(t, cfg.Apply(gomysql.BeforeConnect(func(_ context.Context, c *gomysql.Config) error {
			if c.Params == nil {
				c.Params = map[string]string{}
			}
			delete(c.Params, variable)
			if fenced.Load() {
				c.Params[variable] = "1"
			}
			return nil
		})))
		conn, err := gomysql.NewConnector(cfg)
		require.NoError(t, err)
		db := sql.OpenDB(conn)
		t.Cleanup(func() { _ = db.Close() })
		s, err = store.OpenMySQLDB(ctx, db)
		require.NoError(t, err)
	}
	return s
}

// docs/operations.md, "When the database goes away": a failover whose
// reconnections first reach a server that takes no writes (the old
// primary fenced read-only, a replica) makes the worker's claims fail,
// saying the server is read-only; once the database's name leads to a
// server that takes writes, the worker claims again within a poll or two.
// Before, the pool kept the read-only connections, and, in a busy
// process, reused them until their lifetime ended (an hour), every claim
// failing.
func TestAWorkerWhoseServerWasReadOnlyForAWhileClaimsOnceWritesAreTakenAgain(t *testing.T) {
	networked(t, func(t *testing.T, name, u string) {
		ctx := context.Background()
		direct := testdb.Opener(t, u)()
		proxy, pu := faultnet.Route(t, u)
		var fenced atomic.Bool
		s := openFenceable(t, name, pu, &fenced)
		reg, started, client := netJobs(t, direct)
		logs := &logCount{}
		w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{PollInterval: 20 * time.Millisecond, Logger: slog.New(logs)})
		require.NoError(t, err)
		_, err = client.Enqueue(ctx, netJob{N: 0})
		require.NoError(t, err)
		runCtx, stop := context.WithCancel(ctx)
		exited := make(chan error, 1)
		go func() { exited <- w.Run(runCtx) }()
		require.Equal(t, []int{0}, receive(t, started, 1))

		// The failover: every connection drops, and the new ones reach a
		// server that takes no writes.
		fenced.Store(true)
		proxy.Cut()
		require.Eventually(t, func() bool { return logs.count("sluice: claim failed") >= 2 }, 30*time.Second, 5*time.Millisecond)
		require.Regexp(t, `(?i)read.?only`, logs.lastErr("sluice: claim failed"))

		// The name now leads to the new primary.
		fenced.Store(false)
		_, err = client.Enqueue(ctx, netJob{N: 1})
		require.NoError(t, err)
		select {
		case n := <-started:
			require.Equal(t, 1, n)
		case <-time.After(15 * time.Second):
			t.Fatalf("the worker still claims on its read-only connections: %s", logs.lastErr("sluice: claim failed"))
		}
		stop()
		require.NoError(t, <-exited)
	})
}
