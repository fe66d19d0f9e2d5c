package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// docs/rate-limits.md: a worker that declares no limit takes the jobs that
// still carry keys "at start and at each poll (PollInterval)". A worker
// that this process's enqueues wake more often than PollInterval never
// reaches its poll timer (each wait makes a new one), so the keyed job
// stays ready however many poll intervals pass.
func TestAWorkerWithNoLimitWokenOftenStillTakesKeyedJobs(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[sms]{To: 1, Per: time.Minute, Key: "global"})))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error { return nil }))
		ran := make(chan string, 100)
		reg2 := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg2, func(_ context.Context, j *jobs.Job[sms]) error { ran <- "sms"; return nil }))
		require.NoError(t, jobs.Register(reg2, func(_ context.Context, j *jobs.Job[noop]) error { ran <- "noop"; return nil }))
		w, err := jobs.NewWorker(testdb.Public(h.store), reg2, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Second})
		require.NoError(t, err)
		stop := h.run(w)
		defer stop()
		<-h.clock.WaitForTimerAt(h.clock.Now().Add(time.Second)) // started: its first claim found nothing

		id := h.enqueue(sms{}) // keyed
		for i := range 10 {    // ten seconds of traffic: nine poll intervals
			h.clock.Advance(900 * time.Millisecond)
			h.enqueue(noop{N: i}) // wakes the worker before its poll
			select {
			case k := <-ran:
				if k == "sms" {
					return
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the plain job did not run")
			}
			<-h.clock.WaitForTimerAt(h.clock.Now().Add(time.Second))
		}
		require.Equal(t, engine.StateReady, h.job(id).State)
		t.Fatalf("after %s of fake time (PollInterval 1s) the keyed job is still ready", 9*time.Second)
	})
}
