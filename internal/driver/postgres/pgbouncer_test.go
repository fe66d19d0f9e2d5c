package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/driver/postgres"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// pgbouncerEnv names a PgBouncer in transaction mode (pool_mode =
// transaction) in front of the test server, whose [databases] section
// has a fallback (* = host=… port=…) so that the tests can make a
// database of their own and reach it through the pooler.
const pgbouncerEnv = "SLUICE_TEST_PGBOUNCER_URL"

// pgbouncerDatabase makes a fresh database through the PgBouncer at
// SLUICE_TEST_PGBOUNCER_URL, dropped when the test ends, and returns its
// URL through the pooler. It skips without the variable, or fails when CI
// is set; an unreachable pooler fails.
func pgbouncerDatabase(t *testing.T) string {
	t.Helper()
	base := os.Getenv(pgbouncerEnv)
	if base == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set, and CI is: the suite must run behind PgBouncer too (.ci/run starts one)", pgbouncerEnv)
		}
		t.Skipf("no PgBouncer: set %s (transaction mode)", pgbouncerEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := func(ctx context.Context) *pgx.Conn {
		cfg, err := pgx.ParseConfig(base)
		require.NoError(t, err, pgbouncerEnv)
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		c, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err, "%s: PgBouncer unreachable", pgbouncerEnv)
		return c
	}
	c := admin(ctx)
	defer c.Close(context.Background())
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "sluice_pgb_" + hex.EncodeToString(b)
	_, err := c.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := admin(ctx)
		defer c.Close(ctx)
		_, err := c.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
		require.NoError(t, err)
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// withParams adds query parameters to u.
func withParams(t *testing.T, u string, kv ...string) string {
	t.Helper()
	p, err := url.Parse(u)
	require.NoError(t, err)
	q := p.Query()
	for i := 0; i < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	p.RawQuery = q.Encode()
	return p.String()
}

// Behind PgBouncer in transaction mode, pgx's default query exec mode
// prepares named statements on whichever server connection the pooler
// lends, and fails on the next client's ("prepared statement … already
// exists"), and describe_exec runs a statement it described in the round
// trip before, maybe on another server connection ("unnamed prepared
// statement does not exist"): Open refuses both, naming the parameter
// that fixes it.
func TestBehindPgBouncerOpenRefusesNamedStatements(t *testing.T) {
	db := pgbouncerDatabase(t)
	for _, u := range []string{db, withParams(t, db, "default_query_exec_mode", "describe_exec")} {
		_, err := postgres.Open(context.Background(), u)
		require.ErrorIs(t, err, postgres.ErrSharedPreparedStatements, u)
		require.ErrorContains(t, err, "default_query_exec_mode=cache_describe")
	}
}

// OpenPool's check connects its second client as the pool connects:
// through the pool's BeforeConnect (here it supplies the port, as a hook
// would a rotating password), so that it finds the pooler all the same.
func TestBehindPgBouncerOpenPoolChecksThroughThePoolsHooks(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgbouncerDatabase(t))
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := uint16(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	realPort := cfg.ConnConfig.Port
	cfg.ConnConfig.Port = closed
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.Port = realPort
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = postgres.OpenPool(ctx, pool)
	require.ErrorIs(t, err, postgres.ErrSharedPreparedStatements)
}

type pgbouncerJob struct{ N int }

func (pgbouncerJob) Kind() string { return "pgbouncer_job" }

// Behind PgBouncer in transaction mode, with each query exec mode that
// prepares no named statement and notifications off (the URLs of
// docs/operations.md), concurrent migrators take turns on the
// transaction-scoped advisory lock, and a worker and a dispatcher run
// jobs under a concurrency limit, some of them scheduled (promoted, with
// the bounded lock wait of a promotion's new semaphore rows), each once.
// Afterwards no server connection of the pooler's holds session state of
// sluice's: a setting, a prepared statement, a LISTEN, an advisory lock.
func TestBehindPgBouncerInTransactionMode(t *testing.T) {
	for _, mode := range []string{"cache_describe", "exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			db := pgbouncerDatabase(t)
			u := withParams(t, db, "default_query_exec_mode", mode, "sluice_notify", "off")
			s := testdb.Opener(t, u)()

			var wg sync.WaitGroup
			errs := make([]error, 3)
			for i := range errs {
				wg.Go(func() { _, errs[i] = testdb.Opener(t, u)().MigrateUp(ctx, 0) })
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "migrator %d", i)
			}
			require.NoError(t, s.CheckSchema(ctx))

			reg := jobs.NewRegistry()
			var ran atomic.Int64
			require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[pgbouncerJob]) error {
				ran.Add(1)
				return nil
			}, jobs.ConcurrencyLimit(concurrency.Limit[pgbouncerJob]{Key: func(a pgbouncerJob) any { return a.N % 3 }, To: 2})))
			const n = 60
			items := make([]jobs.Item, n)
			for i := range items {
				items[i] = jobs.Item{Args: pgbouncerJob{N: i}}
				if i%3 == 0 {
					items[i].Options = []jobs.EnqueueOption{jobs.Delay(100 * time.Millisecond)}
				}
			}
			pub := testdb.Public(s)
			_, err := jobs.NewClient(pub, reg, jobs.ClientConfig{}).EnqueueMany(ctx, items)
			require.NoError(t, err)
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			w, err := jobs.NewWorker(pub, reg, jobs.WorkerConfig{Logger: quiet, PollInterval: 20 * time.Millisecond})
			require.NoError(t, err)
			d, err := dispatcher.New(pub, dispatcher.Config{Logger: quiet, Interval: 20 * time.Millisecond})
			require.NoError(t, err)
			runCtx, stop := context.WithCancel(ctx)
			var running sync.WaitGroup
			for _, run := range []func(context.Context) error{w.Run, d.Run} {
				running.Go(func() { _ = run(runCtx) })
			}
			completed := func() int64 {
				st, err := s.Stats(ctx)
				require.NoError(t, err)
				var total int64
				for _, q := range st {
					total += q.Counts[engine.StateCompleted]
				}
				return total
			}
			require.Eventually(t, func() bool { return completed() == n }, time.Minute, 20*time.Millisecond)
			stop()
			running.Wait()
			require.EqualValues(t, n, ran.Load(), "each job ran once")

			requireNoSessionState(t, db)
		})
	}
}

// requireNoSessionState pins as many of the pooler's server connections
// as it can at once, each in a transaction of its own, and checks that
// none keeps state of sluice's from an earlier client's transaction.
func requireNoSessionState(t *testing.T, u string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(u)
	require.NoError(t, err)
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	const clients = 12 // more than the store's pool and the dispatcher's held
	var txs []pgx.Tx
	defer func() {
		for _, tx := range txs {
			_ = tx.Rollback(ctx)
		}
	}()
	seen := map[uint32]bool{}
	for range clients {
		c, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		tx, err := c.Begin(ctx)
		require.NoError(t, err)
		txs = append(txs, tx)
		var (
			pid                                 uint32
			lockTimeout, planCache              string
			prepared, listening, advisory, temp int
		)
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid(),
			current_setting('lock_timeout'), current_setting('plan_cache_mode'),
			(SELECT count(*) FROM pg_prepared_statements),
			(SELECT count(*) FROM pg_listening_channels()),
			(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
			(SELECT count(*) FROM pg_namespace WHERE oid = pg_my_temp_schema())`).
			Scan(&pid, &lockTimeout, &planCache, &prepared, &listening, &advisory, &temp))
		seen[pid] = true
		require.Equal(t, "0", lockTimeout, "server connection %d", pid)
		require.Equal(t, "auto", planCache, "server connection %d", pid)
		require.Zero(t, prepared, "server connection %d keeps prepared statements", pid)
		require.Zero(t, listening, "server connection %d listens", pid)
		require.Zero(t, advisory, "server connection %d holds an advisory lock", pid)
		require.Zero(t, temp, "server connection %d has temporary tables", pid)
	}
	t.Logf("checked %d server connections", len(seen))
}

// Behind PgBouncer in transaction mode, LISTEN is accepted but nothing
// it should hear arrives: the listener says so
// (engine.ErrNotificationsUnheard, its message naming sluice_notify=off)
// instead of leaving workers to poll in silence, and no server connection
// is left listening on sluice's channel.
func TestBehindPgBouncerTheListenerSaysItHearsNothing(t *testing.T) {
	defer postgres.SetHearWithin(time.Second)()
	ctx := context.Background()
	u := withParams(t, pgbouncerDatabase(t), "default_query_exec_mode", "cache_describe")
	s := testdb.Opener(t, u)()
	listenCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	listened := false
	err := s.DB().(engine.Listener).Listen(listenCtx, engine.Channel, func() { listened = true }, func(string) {})
	require.ErrorIs(t, err, engine.ErrNotificationsUnheard)
	require.ErrorContains(t, err, "sluice_notify=off")
	require.False(t, listened, "it never LISTENed on sluice's channel")
	requireNoSessionState(t, u)
}
