package jobs_test

// The database goes away while sluice runs: every connection of the
// worker's and the dispatcher's pools is cut at once and new ones are
// refused for a while (a server restart, a failover), through a real TCP
// proxy (internal/faultnet), on the databases reached over a network.

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/faultnet"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

type netJob struct{ N int }

func (netJob) Kind() string { return "net_job" }

// networked runs fn on each database reached over a network (SQLite has
// no connection to cut), with the URL of a fresh migrated database.
func networked(t *testing.T, fn func(t *testing.T, name, u string)) {
	for _, b := range backends(t) {
		if b.Name == "sqlite" {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			u := b.URL(t)
			_, err := testdb.Opener(t, u)().MigrateUp(context.Background(), 0)
			require.NoError(t, err)
			fn(t, b.Name, u)
		})
	}
}

// docs/operations.md, "When the database goes away": a worker and a dispatcher
// whose server goes down — every connection cut, new ones refused — while
// jobs run and scheduled jobs come due neither exit nor lose a job: the
// runs that finished meanwhile are recorded once the server is back, the
// due jobs are promoted and run, and the failed claims and ticks are
// logged at a pace that backs off, not once per poll.
func TestAServerRestartLosesNoJobAndStopsNoProcess(t *testing.T) {
	networked(t, func(t *testing.T, name, u string) {
		ctx := context.Background()
		direct := testdb.Opener(t, u)()
		proxy, pu := faultnet.Route(t, u)
		open := testdb.Opener(t, pu)

		gate := make(chan struct{})
		started := make(chan int, 16)
		var mu sync.Mutex
		ran := map[int]int{}
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[netJob]) error {
			mu.Lock()
			ran[j.Args.N]++
			mu.Unlock()
			started <- j.Args.N
			if j.Args.N < 2 {
				<-gate
			}
			return nil
		}))
		client := jobs.NewClient(testdb.Public(direct), reg, jobs.ClientConfig{})
		logs := &logCount{}
		log := slog.New(logs)
		w, err := jobs.NewWorker(testdb.Public(open()), reg, jobs.WorkerConfig{Concurrency: 4, PollInterval: 20 * time.Millisecond, Logger: log, JobTimeout: -1})
		require.NoError(t, err)
		d := newDispatcher(t, open(), dispatcher.Config{Interval: 20 * time.Millisecond, Logger: log})
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		exited := make(chan string, 2)
		go func() { _ = w.Run(runCtx); exited <- "worker" }()
		go func() { _ = d.Run(runCtx); exited <- "dispatcher" }()

		var ids []int64
		for n := 0; n < 2; n++ {
			id, err := client.Enqueue(ctx, netJob{N: n})
			require.NoError(t, err)
			ids = append(ids, id.ID)
		}
		require.ElementsMatch(t, []int{0, 1}, receive(t, started, 2))
		// Jobs that come due while the server is down.
		for n := 2; n < 5; n++ {
			id, err := client.Enqueue(ctx, netJob{N: n}, jobs.Delay(300*time.Millisecond))
			require.NoError(t, err)
			ids = append(ids, id.ID)
		}

		proxy.Down()
		close(gate) // the running jobs finish while it is down
		outage := time.Now()
		require.Eventually(t, func() bool {
			return logs.count("sluice: claim failed") >= 3 && logs.count("sluice: dispatcher tick") >= 1
		}, 30*time.Second, 5*time.Millisecond, "the worker and the dispatcher meet the outage")
		// The server stays down for a while: two seconds of refused connections.
		for time.Since(outage) < 2*time.Second {
			select {
			case who := <-exited:
				t.Fatalf("the %s returned while the server was down", who)
			case <-time.After(10 * time.Millisecond):
			}
		}
		claims, ticks := logs.count("sluice: claim failed"), logs.count("sluice: dispatcher tick")
		t.Logf("%s: in 2 s down, %d failed claims, %d failed ticks logged", name, claims, ticks)
		proxy.Up()

		require.Eventually(t, func() bool {
			for _, id := range ids {
				j, err := direct.GetJob(ctx, id)
				if err != nil || j.State != engine.StateCompleted {
					return false
				}
			}
			return true
		}, 30*time.Second, 10*time.Millisecond, "every job completes once the server is back")
		mu.Lock()
		for n := 0; n < 5; n++ {
			require.Equal(t, 1, ran[n], "job %d ran once", n)
		}
		mu.Unlock()
		// Failed claims back off (PollInterval doubling to 5 s), and so do
		// failed ticks: two seconds down at a 20 ms pace is 100 polls.
		require.LessOrEqual(t, claims, 12)
		require.LessOrEqual(t, ticks, 12)
		if name == "postgres" {
			// The listener's connection went too; the worker's Logger
			// hears so (before, it went to slog.Default()).
			require.Positive(t, logs.count("sluice: notifications lost; workers poll until they return"))
		}

		// Stopped while the server is down again, with no result in hand,
		// both return at once: the deregistration that fails is logged.
		proxy.Down()
		stop()
		for i := 0; i < 2; i++ {
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				t.Fatal("a shutdown while the server is down hung")
			}
		}
		require.Equal(t, 2, logs.count("sluice: deregister"))
	})
}

// docs/operations.md, "PostgreSQL notes": after a server restart the
// workers' listener connects and LISTENs again, so that a job another
// process enqueues starts at once, not at the next poll (an hour here).
func TestAWorkerHearsOtherProcessesEnqueuesAgainAfterAServerRestart(t *testing.T) {
	pg, ok := testdb.Named(t, "postgres")
	if !ok {
		t.Fatal("LISTEN/NOTIFY is PostgreSQL's: this test needs SLUICE_TEST_POSTGRES_URL")
	}
	ctx := context.Background()
	u := pg.URL(t)
	direct := testdb.Opener(t, u)()
	_, err := direct.MigrateUp(ctx, 0)
	require.NoError(t, err)
	proxy, pu := faultnet.Route(t, u)
	reg, started, client := netJobs(t, direct)
	logs := &logCount{}
	w, err := jobs.NewWorker(testdb.Public(testdb.Opener(t, pu)()), reg, jobs.WorkerConfig{PollInterval: time.Hour, Logger: slog.New(logs)})
	require.NoError(t, err)
	enqueue := func(n int) {
		t.Helper()
		_, err := client.Enqueue(ctx, netJob{N: n})
		require.NoError(t, err)
	}
	enqueue(0) // the worker's first claim takes it
	runCtx, stop := context.WithCancel(ctx)
	exited := make(chan error, 1)
	go func() { exited <- w.Run(runCtx) }()
	require.Equal(t, []int{0}, receive(t, started, 1))

	proxy.Down()
	require.Eventually(t, func() bool {
		return logs.count("sluice: notifications lost; workers poll until they return") > 0
	}, 30*time.Second, 5*time.Millisecond)
	proxy.Up()
	// The listener listens again within its back-off (1 s here), and
	// the claims its wake-up starts find the database back; then
	// another process's enqueue wakes the worker.
	enqueue(1)
	require.Equal(t, []int{1}, receive(t, started, 1))
	enqueue(2)
	select {
	case n := <-started:
		require.Equal(t, 2, n)
	case <-time.After(10 * time.Second):
		t.Fatal("another process's enqueue did not wake the worker after the restart")
	}
	stop()
	require.NoError(t, <-exited)
}

// netJobs registers netJob with a handler that sends each job's N on
// started, and returns a client on direct.
func netJobs(t *testing.T, direct *engine.Store) (*jobs.Registry, <-chan int, *jobs.Client) {
	t.Helper()
	started := make(chan int, 4)
	reg := jobs.NewRegistry()
	require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[netJob]) error {
		started <- j.Args.N
		return nil
	}))
	return reg, started, jobs.NewClient(testdb.Public(direct), reg, jobs.ClientConfig{})
}
