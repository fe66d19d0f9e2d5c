package metrics_test

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/metrics"
	"github.com/sluicequeue/sluice/ratelimit"
)

// sumCounter sums every series of the named metric family.
func sumCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// queryInt reads one integer from the database.
func queryInt(t *testing.T, s *engine.Store, q string) int64 {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), q)
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rows.Next())
	var n int64
	require.NoError(t, rows.Scan(&n))
	return n
}

// labelled returns the value of the named counter's series with labels.
func labelled(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// docs/observability.md, "Deferrals on the job": deferrals are "written by
// the same statement that defers it, by a claim or by the sweep that
// defers a flood in bulk", and sluice_jobs_deferred_total{kind,limit}
// counts the jobs a rate limit sent back to wait. A flood on a tight limit
// is deferred mostly by the worker's sweep, whose deferrals once reached
// no hook: of a flood of 1,000, the counter said 9 where the jobs recorded
// 999 deferrals.
func TestTheDeferredCounterCountsTheJobsASweepDefers(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		m := metrics.New(testdb.Public(s), metrics.Config{Clock: c})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(m))

		jr := jobs.NewRegistry()
		require.NoError(t, jobs.Register(jr, func(context.Context, *jobs.Job[charge]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[charge]{To: 1, Per: time.Hour, Key: "global"})))
		client := jobs.NewClient(testdb.Public(s), jr, jobs.ClientConfig{Clock: c})
		const flood = 500
		items := make([]jobs.Item, flood)
		for i := range items {
			items[i] = jobs.Item{Args: charge{Account: i}}
		}
		_, err := client.EnqueueMany(ctx, items)
		require.NoError(t, err)

		w, err := jobs.NewWorker(testdb.Public(s), jr, jobs.WorkerConfig{Clock: c, Hooks: m.Hooks(), PollInterval: time.Hour,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(runCtx) }()
		// The first claim admits one job and parks the next (its slot is
		// an hour away, past the 5-minute horizon), which starts a sweep
		// of the rest at once.
		// The sweep's last batch is in the database before its reply
		// reaches the sweep, which then tells the hook: stopping the
		// worker in between could cut that reply off (a lost reply,
		// docs/observability.md), so the test waits for the counter to
		// catch up before it stops the worker. A deferral the hooks never
		// hear of keeps it waiting, and the test fails.
		require.Eventually(t, func() bool {
			return queryInt(t, s, `SELECT COUNT(*) FROM sluice_jobs WHERE state = 'ready'`) == 0 &&
				float64(queryInt(t, s, `SELECT COALESCE(SUM(deferrals), 0) FROM sluice_jobs`)) == sumCounter(t, reg, "sluice_jobs_deferred_total")
		}, 2*time.Minute, 10*time.Millisecond, "the flood left the ready queue, and its deferrals were counted")
		cancel()
		require.NoError(t, <-done) // Run waits for its sweeps, and so for their events
		stored := queryInt(t, s, `SELECT COALESCE(SUM(deferrals), 0) FROM sluice_jobs`)
		waiting := queryInt(t, s, `SELECT COUNT(*) FROM sluice_jobs WHERE state IN ('scheduled', 'parked')`)
		counted := sumCounter(t, reg, "sluice_jobs_deferred_total")
		t.Logf("jobs waiting on the limit: %d; deferrals stored on the jobs: %d; sluice_jobs_deferred_total: %v", waiting, stored, counted)
		require.EqualValues(t, flood-1, waiting)
		require.EqualValues(t, stored, counted,
			"every deferral the jobs record is counted in sluice_jobs_deferred_total")
		require.EqualValues(t, stored, labelled(t, reg, "sluice_jobs_deferred_total", map[string]string{"kind": "charge", "limit": "charge"}),
			"under the kind, and the limit that held them (the kind's own)")
		require.Zero(t, sumCounter(t, reg, "sluice_jobs_would_defer_total"))
	})
}
