package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
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

// Review (observability): the Prometheus collector against the database.

func reviewQuiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// gauges returns the named gauge's series as "label=value,…" → value.
func gauges(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			out[strings.Join(ls, ",")] = m.GetGauge().GetValue()
		}
	}
	return out
}

// docs/recurring.md, "Metrics": sluice_oldest_waiting_job_age_seconds is
// "the oldest job waiting to run … A job no limit holds waits from its run
// time, not its enqueue: one scheduled an hour ahead, or retried after a
// backoff, is 0 s old when it comes due"; operations.md: "alert on
// sluice_oldest_waiting_job_age_seconds{throttled="false"}". A job that
// came due an hour ago and that nothing has made ready (no worker and no
// dispatcher is up: the very stuck queue the alert is for) is waiting to
// run, and has been for an hour. The gauge reads only ready, blocked and
// rate-limit-waiting jobs (the OldestWaiting query), so a queue whose
// backlog is all delayed or retried jobs shows no waiting job at all, for
// as long as it stays stuck.
func TestReviewObserveOldestWaitingSeesADueJobNoOneMadeReady(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c := clock.NewFake(t0)
		m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(m))
		jr := jobs.NewRegistry()
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[ping]) error { return nil }))
		client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c})
		_, err := client.Enqueue(ctx, ping{N: 1}, jobs.Delay(time.Minute))
		require.NoError(t, err)

		c.Advance(time.Hour + time.Minute) // due an hour ago; no process is up to promote it
		got := gauges(t, reg, "sluice_oldest_waiting_job_age_seconds")
		t.Logf("sluice_oldest_waiting_job_age_seconds: %v; sluice_jobs: %v", got, gauges(t, reg, "sluice_jobs"))
		require.Equal(t, map[string]float64{"queue=default,throttled=false": 3600}, got,
			"the job has waited to run for an hour")
	})
}

type reviewProbe struct{}

func (reviewProbe) Kind() string { return "review_probe" }

type reviewFair struct{ Tenant int }

func (reviewFair) Kind() string { return "review_fair" }

type reviewSlot struct{ N int }

func (reviewSlot) Kind() string { return "review_slot" }

// sluice_jobs{queue,state} is "the jobs not completed or cancelled, read at
// scrape": at a quiet point it equals a plain count of the jobs table, for
// every state a job can be in (ready plain, limited and fair; scheduled;
// parked plain and fair; blocked; running; failed), queue by queue. The
// probe job compares the two while it runs, so that one job is running.
func TestReviewObserveQueueDepthMatchesACountQuery(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c := clock.NewFake(t0)
		m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(m))
		jr := jobs.NewRegistry()
		require.NoError(t, jobs.Register(jr, func(_ context.Context, j *jobs.Job[ping]) error {
			if j.Args.N < 0 {
				return errors.New("for good")
			}
			return nil
		}, jobs.MaxAttempts(1)))
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[charge]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[charge]{To: 1, Per: time.Hour, Key: func(c charge) any { return c.Account }})))
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[reviewFair]) error { return nil }, jobs.Queue("fair"),
			jobs.Fair(func(f reviewFair) any { return f.Tenant }),
			jobs.RateLimit(ratelimit.Limit[reviewFair]{To: 1, Per: time.Hour, Key: "all"})))
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[reviewSlot]) error { return nil }, jobs.Queue("slots"),
			jobs.ConcurrencyLimit(concurrency.Limit[reviewSlot]{Key: "one"})))
		var compared bool
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[reviewProbe]) error {
			want := countByState(t, s)
			got := gauges(t, reg, "sluice_jobs")
			for k, v := range got {
				if v == 0 {
					delete(got, k)
				}
			}
			t.Logf("count query: %v", want)
			t.Logf("sluice_jobs: %v", got)
			require.Equal(t, want, got)
			compared = true
			return nil
		}, jobs.Queue("probe")))
		client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c})
		enqueue := func(a jobs.Args, opts ...jobs.EnqueueOption) {
			_, err := client.Enqueue(ctx, a, opts...)
			require.NoError(t, err)
		}
		// Failed for good, and run in a drain of its own queue first.
		enqueue(ping{N: -1})
		drain(t, s, jr, c, "default")
		for i := range 3 {
			enqueue(charge{Account: 1}) // one admitted, the rest parked (an hour's slot)
			enqueue(reviewFair{Tenant: i % 2})
		}
		drain(t, s, jr, c, "default", "fair")
		enqueue(charge{Account: 2})                // ready, limited
		enqueue(reviewFair{Tenant: 5})             // ready, fair
		enqueue(ping{N: 1})                        // ready, plain
		enqueue(ping{N: 2}, jobs.Delay(time.Hour)) // scheduled
		enqueue(reviewSlot{N: 1})                  // holds the slot, ready
		enqueue(reviewSlot{N: 2})                  // blocked
		enqueue(reviewProbe{})
		drain(t, s, jr, c, "probe")
		require.True(t, compared, "the probe ran")
	})
}

// countByState counts the jobs not completed or cancelled by queue and
// state, as "queue=Q,state=S" → n.
func countByState(t *testing.T, s *engine.Store) map[string]float64 {
	t.Helper()
	rows, err := s.DB().Query(context.Background(),
		`SELECT queue, state, COUNT(*) FROM sluice_jobs WHERE state NOT IN ('completed', 'cancelled') GROUP BY queue, state`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var q, st string
		var n int64
		require.NoError(t, rows.Scan(&q, &st, &n))
		out[fmt.Sprintf("queue=%s,state=%s", q, st)] = float64(n)
	}
	require.NoError(t, rows.Err())
	return out
}

func drain(t *testing.T, s *engine.Store, jr *jobs.Registry, c clock.Clock, queues ...string) jobs.DrainResult {
	t.Helper()
	w, err := jobs.NewWorker(testdb.Public(s), jr, jobs.WorkerConfig{Clock: c, Queues: queues, Logger: reviewQuiet()})
	require.NoError(t, err)
	res, err := w.Drain(context.Background())
	require.NoError(t, err)
	return res
}

// A claim whose transaction fails at its last write (a deadlock, as the
// store sees it) and is run again, and a completion whose write fails so
// and is run again, are counted once: sluice_jobs_deferred_total equals
// the deferrals the jobs record, and sluice_jobs_finished_total the runs.
func TestReviewObserveARetriedWriteIsCountedOnce(t *testing.T) {
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
		w, err := jobs.NewWorker(testdb.Public(s), jr, jobs.WorkerConfig{Clock: c, Hooks: m.Hooks(), Logger: reviewQuiet()})
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
func TestReviewObserveTwoProcessesSweepingOneFloodCountEachDeferralOnce(t *testing.T) {
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
				Logger: reviewQuiet()})
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
func TestReviewObserveARetriedEnqueueIsCountedOnce(t *testing.T) {
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
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[reviewSlot]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[reviewSlot]{Key: "one"})))
		client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c, OnEnqueue: m.OnEnqueue})
		faults.FailOnce = "INSERT INTO sluice_jobs"
		_, err := client.EnqueueMany(ctx, []jobs.Item{{Args: refresh{Shop: 1}}, {Args: refresh{Shop: 1}}, {Args: refresh{Shop: 2}},
			{Args: reviewSlot{N: 1}}, {Args: reviewSlot{N: 2}}})
		require.NoError(t, err)
		require.Empty(t, faults.FailOnce, "the fault fired")
		total := queryInt(t, s, `SELECT COUNT(*) FROM sluice_jobs`)
		blocked := queryInt(t, s, `SELECT COUNT(*) FROM sluice_jobs WHERE state = 'blocked'`)
		require.EqualValues(t, 4, total)
		require.EqualValues(t, 1, blocked)
		require.EqualValues(t, 1, labelled(t, reg, "sluice_jobs_enqueued_total", map[string]string{"kind": "refresh", "result": "joined"}))
		require.EqualValues(t, 2, labelled(t, reg, "sluice_jobs_enqueued_total", map[string]string{"kind": "refresh", "result": "created"}))
		require.EqualValues(t, 1, labelled(t, reg, "sluice_jobs_enqueued_total", map[string]string{"kind": "review_slot", "result": "created"}))
		require.EqualValues(t, 1, labelled(t, reg, "sluice_jobs_enqueued_total", map[string]string{"kind": "review_slot", "result": "blocked"}))
		require.EqualValues(t, 1, sumCounter(t, reg, "sluice_jobs_coalesced_total"))
		require.EqualValues(t, 1, sumCounter(t, reg, "sluice_jobs_blocked_total"))
	})
}
