package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// docs/observability.md: "jobs.OnRelease(ctx, f) calls f if the worker,
// shutting down, releases the job while it still runs ...: the run's
// outcome is then never recorded"; jobs/events.go: OutcomeReleased is an
// outcome of a run, and docs/recurring.md lists `released` among
// sluice_jobs_finished_total's outcomes.
//
// A handler that ignores its context past the shutdown timeout and grace
// is released: the job is ready again and will run again. When that
// handler returns nil later, the worker still calls OnFinish for the run,
// with Outcome "completed" (execute calls the hook before ran() sees the
// release), and never reports "released": the Prometheus and OpenTelemetry
// counters count a completion that did not happen (otelsluice's span, in
// contrast, says released).
func TestARunReleasedAtShutdownIsNotReportedAsCompleted(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan struct{}, 1)
		unblock := make(chan struct{})
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[noop]) error {
			started <- struct{}{}
			<-unblock // ignores its context
			return nil
		}))
		var mu sync.Mutex
		var events []jobs.FinishEvent
		hooks := jobs.Hooks{OnFinish: func(e jobs.FinishEvent) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		}}
		id := h.enqueue(noop{N: 1})
		w := h.worker(jobs.WorkerConfig{ShutdownTimeout: 30 * time.Second, PollInterval: time.Hour, JobTimeout: -1, Hooks: hooks})
		stop := h.run(w)
		receive(t, started, 1)
		go func() {
			<-h.clock.WaitForTimerAt(t0.Add(30 * time.Second))
			h.clock.Advance(30 * time.Second)
			<-h.clock.WaitForTimerAt(t0.Add(31 * time.Second))
			h.clock.Advance(time.Second)
		}()
		stop()
		require.Equal(t, engine.StateReady, h.job(id).State, "the stubborn run was released")
		close(unblock)
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(events) > 0 }, 10*time.Second, time.Millisecond,
			"a released run is reported to OnFinish (as released), at the release or when its handler returns")
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			t.Logf("OnFinish: job %d attempt %d outcome %s", e.JobID, e.Attempt, e.Outcome)
			require.NotEqual(t, jobs.OutcomeCompleted, e.Outcome,
				"job %d was released (state ready, it runs again), yet OnFinish reported its run completed", id)
		}
		require.Equal(t, engine.StateReady, h.job(id).State)
	})
}
