package otelsluice_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/otelsluice"
	"github.com/sluicequeue/sluice/ratelimit"
)

// finishedByOutcome sums sluice.jobs.finished by outcome.
func finishedByOutcome(t *testing.T, e *env) map[string]int64 {
	t.Helper()
	got := map[string]int64{}
	for _, dp := range sum(t, collect(t, e), "sluice.jobs.finished").DataPoints {
		o, _ := dp.Attributes.Value("sluice.outcome")
		got[o.AsString()] += dp.Value
	}
	return got
}

// observability.md: a run the worker releases at shutdown while its
// handler still runs has its span ended at the release, as released; its
// sluice.jobs.finished and sluice.job.duration say the same, once, by the
// time Run returns. The handler's later return once counted a completion
// that never happened, and no release.
func TestAReleasedRunsSpanAndMetricsAgree(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		started := make(chan struct{}, 1)
		unblock := make(chan struct{})
		returned := make(chan struct{})
		require.NoError(t, jobs.Register(e.reg, func(ctx context.Context, j *jobs.Job[email]) error {
			defer close(returned)
			started <- struct{}{}
			<-unblock // ignores its context
			return nil
		}))
		_, err := e.client.Enqueue(context.Background(), email{To: "stubborn"})
		require.NoError(t, err)
		w := e.worker(jobs.WorkerConfig{ShutdownTimeout: 30 * time.Second, PollInterval: time.Hour, JobTimeout: -1})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		<-started
		go func() {
			<-e.clock.WaitForTimerAt(t0.Add(30 * time.Second))
			e.clock.Advance(30 * time.Second)
			<-e.clock.WaitForTimerAt(t0.Add(31 * time.Second))
			e.clock.Advance(time.Second)
		}()
		cancel()
		require.NoError(t, <-done)

		run := e.span("process default")
		require.Equal(t, "released", attrs(run)["sluice.outcome"].AsString())
		require.Equal(t, map[string]int64{"released": 1}, finishedByOutcome(t, e), "the metric says what the span says")
		var runs uint64
		for _, dp := range histogram(t, collect(t, e), "sluice.job.duration").DataPoints {
			o, _ := dp.Attributes.Value("sluice.outcome")
			require.Equal(t, "released", o.AsString())
			runs += dp.Count
		}
		require.Equal(t, uint64(1), runs)

		close(unblock)
		<-returned
		// The worker would report the return right after it, from the
		// run's goroutine.
		time.Sleep(100 * time.Millisecond)
		require.Equal(t, map[string]int64{"released": 1}, finishedByOutcome(t, e), "the handler's later return counts nothing")
		require.Len(t, e.spans.Ended(), len(e.spans.Started()))
	})
}

// sluice.jobs.deferred counts the deferrals the worker's sweep makes, as
// the jobs record them: it counted only the claims' few of a flood.
func TestTheDeferredMetricCountsTheJobsASweepDefers(t *testing.T) {
	each(t, otelsluice.Config{}, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(e.reg, func(context.Context, *jobs.Job[email]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[email]{To: 1, Per: time.Hour, Key: "smtp", Group: "mail"})))
		const flood = 500
		items := make([]jobs.Item, flood)
		for i := range items {
			items[i] = jobs.Item{Args: email{To: "x"}}
		}
		_, err := e.client.EnqueueMany(ctx, items)
		require.NoError(t, err)
		w := e.worker(jobs.WorkerConfig{PollInterval: time.Hour})
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(runCtx) }()
		s := testStore(e)
		require.Eventually(t, func() bool {
			return queryCount(t, s, `SELECT COUNT(*) FROM sluice_jobs WHERE state = 'ready'`) == 0
		}, 2*time.Minute, 10*time.Millisecond, "the flood left the ready queue")
		cancel()
		require.NoError(t, <-done) // Run waits for its sweeps' events

		stored := queryCount(t, s, `SELECT COALESCE(SUM(deferrals), 0) FROM sluice_jobs`)
		require.EqualValues(t, flood-1, stored)
		var counted int64
		for _, dp := range sum(t, collect(t, e), "sluice.jobs.deferred").DataPoints {
			limit, _ := dp.Attributes.Value("sluice.limit")
			kind, _ := dp.Attributes.Value("sluice.kind")
			require.Equal(t, "mail", limit.AsString())
			require.Equal(t, "email", kind.AsString())
			counted += dp.Value
		}
		require.Equal(t, stored, counted, "every deferral the jobs record is counted")
	})
}

// testStore is the engine's view of e's store.
func testStore(e *env) *engine.Store { return engine.From(e.store) }

// queryCount reads one integer from the database.
func queryCount(t *testing.T, s *engine.Store, q string) int64 {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), q)
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rows.Next())
	var n int64
	require.NoError(t, rows.Scan(&n))
	require.NoError(t, rows.Err())
	return n
}
