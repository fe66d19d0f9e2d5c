package jobs_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/store"
)

type wokenJob struct{ N int }

func (wokenJob) Kind() string { return "woken_job" }

// closedPort returns a local TCP port nothing listens on.
func closedPort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return uint16(port)
}

// README.md and store.OpenPostgresPool: an app shares its own
// *pgxpool.Pool, and workers LISTEN on a connection of their own, so that
// "a job enqueued anywhere starts within milliseconds" (docs/operations.md,
// PostgreSQL notes). An app's pool whose connections are completed by
// pgxpool.Config.BeforeConnect — the hook pgx offers for credentials that
// rotate (an AWS RDS IAM token, a Vault lease, set as cc.Password on each
// connect) or a primary found by service discovery — connects through
// that hook; so does the listener's connection, made as the pool makes
// its own, and the workers are woken by another process's enqueue, not
// only by their polls. (The test server trusts every password, so the
// hook here supplies the port instead: a listener that skipped it would
// never connect.)
func TestAWorkerOnAnAppsPoolWithBeforeConnectIsWokenByAnotherProcesssEnqueue(t *testing.T) {
	pg, ok := testdb.Named(t, "postgres")
	if !ok {
		t.Fatal("LISTEN/NOTIFY is PostgreSQL's: this test needs SLUICE_TEST_POSTGRES_URL")
	}
	ctx := context.Background()
	u := pg.URL(t)
	other, err := store.Open(ctx, u) // another process
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	_, err = other.MigrateUp(ctx, 0)
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(u)
	require.NoError(t, err)
	realPort := cfg.ConnConfig.Port
	cfg.ConnConfig.Port = closedPort(t) // what the hook replaces on every connect
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.Port = realPort
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := store.OpenPostgresPool(ctx, pool)
	require.NoError(t, err, "the app's pool connects through its hook")

	reg := jobs.NewRegistry()
	ran := make(chan int, 100)
	require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[wokenJob]) error {
		ran <- j.Args.N
		return nil
	}))
	// A fake clock that never moves: the worker never polls after its
	// first claim, so only a wake-up can start a job.
	fake := clock.NewFake(t0)
	w, err := jobs.NewWorker(s, reg, jobs.WorkerConfig{Clock: fake, Logger: quiet()})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() {
		stop()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop")
		}
	}()
	select { // the first claim round is over: the worker waits for its next poll
	case <-fake.WaitForTimerAt(t0.Add(jobs.DefaultPollInterval)):
	case <-time.After(20 * time.Second):
		t.Fatal("the worker never waited for its next poll")
	}

	client := jobs.NewClient(other, reg, jobs.ClientConfig{Clock: fake})
	enqueue := func(n int) {
		t.Helper()
		_, err := client.Enqueue(ctx, wokenJob{N: n})
		require.NoError(t, err)
	}
	// Until one is heard: a NOTIFY sent before the listener LISTENs is
	// not. (A listener that fails to connect wakes the workers each time
	// it gives up, 1 s, 2 s, 4 s … apart, which a test that waited long
	// enough would take for a NOTIFY.)
	heard := false
	for n := 0; n < 40 && !heard; n++ {
		enqueue(n)
		select {
		case <-ran:
			heard = true
		case <-time.After(250 * time.Millisecond):
		}
	}
	require.True(t, heard, "no job another process enqueued in 10 s started")
	for n := 100; n < 105; n++ {
		enqueue(n)
		select {
		case <-ran:
		case <-time.After(time.Second):
			t.Fatalf("job %d, enqueued by another process, did not start within 1 s (only when the listener's next failed reconnect woke the worker): "+
				"the listener dials the pool's ConnConfig without the pool's BeforeConnect, and never connects", n-100)
		}
	}
}
