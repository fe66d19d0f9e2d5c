package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/metrics"
	"github.com/sluicequeue/sluice/ratelimit"
)

// A claim whose transaction fails at its last write (a deadlock, as the
// store sees it) and is run again, and a completion whose write fails so
// and is run again, are counted once: sluice_jobs_deferred_total equals
// the deferrals the jobs record, and sluice_jobs_finished_total the runs.
func TestARetriedWriteIsCountedOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		s, faults := testdb.WithFaults(base)
		m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(m))
		jr := jobs.NewRegistry()
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[charge]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[charge]{To: 1, Per: time.Minute, Key: "global"})))
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[ping]) error { return nil }))
		client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c, OnEnqueue: m.OnEnqueue})
		for i := range 3 {
			_, err := client.Enqueue(ctx, charge{Account: i})
			require.NoError(t, err)
		}
		w, err := jobs.NewWorker(testdb.Public(s), jr, jobs.WorkerConfig{Clock: c, Hooks: m.Hooks(), Logger: quietLogger()})
		require.NoError(t, err)

		// The claim's budget write fails once, after it decided to defer.
		faults.FailOnce = "INSERT INTO sluice_budgets (" + engine.BudgetColumns + ")"
		_, err = w.Drain(ctx)
		require.NoError(t, err)
		require.Empty(t, faults.FailOnce, "the fault fired")
		require.EqualValues(t, queryInt(t, s, `SELECT COALESCE(SUM(deferrals), 0) FROM sluice_jobs`), sumCounter(t, reg, "sluice_jobs_deferred_total"))

		// A completion's write fails once.
		_, err = client.Enqueue(ctx, ping{N: 1})
		require.NoError(t, err)
		faults.FailOnce = "SET state = 'completed'"
		_, err = w.Drain(ctx)
		require.NoError(t, err)
		require.Empty(t, faults.FailOnce, "the fault fired")
		c.Advance(time.Hour)
		for range 3 {
			_, err = w.Drain(ctx)
			require.NoError(t, err)
			c.Advance(time.Minute)
		}
		require.EqualValues(t, 4, queryInt(t, s, `SELECT COUNT(*) FROM sluice_jobs WHERE state = 'completed'`))
		require.EqualValues(t, 4, labelled(t, reg, "sluice_jobs_finished_total", map[string]string{"kind": "charge", "outcome": "completed"})+
			labelled(t, reg, "sluice_jobs_finished_total", map[string]string{"kind": "ping", "outcome": "completed"}))
		require.EqualValues(t, 4, sumCounter(t, reg, "sluice_jobs_finished_total"))
		require.EqualValues(t, queryInt(t, s, `SELECT COALESCE(SUM(deferrals), 0) FROM sluice_jobs`), sumCounter(t, reg, "sluice_jobs_deferred_total"))
		require.EqualValues(t, 4, sumCounter(t, reg, "sluice_jobs_enqueued_total"))
	})
}

// Two worker processes (two stores on one database) meet one flood on a
// tight limit at once: their claims and their sweeps race for the same
// budget. Every deferral the jobs record is counted once, by one or the
// other, in sluice_jobs_deferred_total (one Metrics fed by both workers'
// hooks, as a scrape summed over processes is).
func TestTwoProcessesSweepingOneFloodCountEachDeferralOnce(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(m))
		jr := jobs.NewRegistry()
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[charge]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[charge]{To: 1, Per: time.Hour, Key: "global"})))
		const flood = 200
		items := make([]jobs.Item, flood)
		for i := range items {
			items[i] = jobs.Item{Args: charge{Account: i}}
		}
		_, err := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c}).EnqueueMany(ctx, items)
		require.NoError(t, err)

		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 2)
		for _, st := range []*engine.Store{s, open()} {
			w, err := jobs.NewWorker(testdb.Public(st), jr, jobs.WorkerConfig{Clock: c, Hooks: m.Hooks(), PollInterval: time.Hour,
				Logger: quietLogger()})
			require.NoError(t, err)
			go func() { done <- w.Run(runCtx) }()
		}
		require.Eventually(t, func() bool {
			return queryInt(t, s, `SELECT COUNT(*) FROM sluice_jobs WHERE state IN ('ready', 'running')`) == 0
		}, 2*time.Minute, 10*time.Millisecond, "the flood left the ready queue")
		cancel()
		require.NoError(t, <-done)
		require.NoError(t, <-done)
		stored := queryInt(t, s, `SELECT COALESCE(SUM(deferrals), 0) FROM sluice_jobs`)
		counted := sumCounter(t, reg, "sluice_jobs_deferred_total")
		t.Logf("deferrals stored: %d; counted: %v; finished: %v", stored, counted, sumCounter(t, reg, "sluice_jobs_finished_total"))
		require.EqualValues(t, stored, counted)
		require.EqualValues(t, queryInt(t, s, `SELECT COUNT(*) FROM sluice_jobs WHERE state = 'completed'`),
			sumCounter(t, reg, "sluice_jobs_finished_total"))
	})
}

// An enqueue whose transaction fails (a deadlock, as the store sees it)
// and is written again counts each job once, by what became of it:
// coalesced calls of one batch (one created, the others joined), and a
// concurrency-blocked job, against the rows the database holds.
func TestARetriedEnqueueIsCountedOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		s, faults := testdb.WithFaults(base)
		m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(m))
		jr := jobs.NewRegistry()
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[refresh]) error { return nil },
			jobs.Coalesce(coalesce.Rule[refresh]{Key: func(r refresh) any { return r.Shop }})))
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[oneSlot]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[oneSlot]{Key: "one"})))
		client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c, OnEnqueue: m.OnEnqueue})
		faults.FailOnce = "INSERT INTO sluice_jobs"
		_, err := client.EnqueueMany(ctx, []jobs.Item{{Args: refresh{Shop: 1}}, {Args: refresh{Shop: 1}}, {Args: refresh{Shop: 2}},
			{Args: oneSlot{N: 1}}, {Args: oneSlot{N: 2}}})
		require.NoError(t, err)
		require.Empty(t, faults.FailOnce, "the fault fired")
		total := queryInt(t, s, `SELECT COUNT(*) FROM sluice_jobs`)
		blocked := queryInt(t, s, `SELECT COUNT(*) FROM sluice_jobs WHERE state = 'blocked'`)
		require.EqualValues(t, 4, total)
		require.EqualValues(t, 1, blocked)
		require.EqualValues(t, 1, labelled(t, reg, "sluice_jobs_enqueued_total", map[string]string{"kind": "refresh", "result": "joined"}))
		require.EqualValues(t, 2, labelled(t, reg, "sluice_jobs_enqueued_total", map[string]string{"kind": "refresh", "result": "created"}))
		require.EqualValues(t, 1, labelled(t, reg, "sluice_jobs_enqueued_total", map[string]string{"kind": "one_slot", "result": "created"}))
		require.EqualValues(t, 1, labelled(t, reg, "sluice_jobs_enqueued_total", map[string]string{"kind": "one_slot", "result": "blocked"}))
		require.EqualValues(t, 1, sumCounter(t, reg, "sluice_jobs_coalesced_total"))
		require.EqualValues(t, 1, sumCounter(t, reg, "sluice_jobs_blocked_total"))
	})
}
