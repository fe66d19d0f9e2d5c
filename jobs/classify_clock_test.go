package jobs_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md: "Every time-based decision reads a
// clock.Clock". jobs.Classify is what middleware (and otelsluice's span
// events) report a throttled run's wait with ("Wait is how long a ...
// throttled job waits before it runs again"). For an upstream's
// Retry-After given as an HTTP date, the worker reckons the wait on its
// clock (waitUpstream: w.clock.Now()), and Classify must too: it read
// time.Now(), so under a fake clock a user's middleware test saw a wait of
// years (or 0) where the job waits 5 minutes.
func TestClassifyWaitMatchesTheWorkersOnAFakeClock(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[rvProfile]) error {
			resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
			resp.Header.Set("Retry-After", h.clock.Now().Add(5*time.Minute).UTC().Format(http.TimeFormat))
			return jobs.RetryAfterResponse(resp, time.Second)
		}))
		var mu sync.Mutex
		var verdicts []jobs.Verdict
		mw := func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
			err := next(ctx)
			mu.Lock()
			verdicts = append(verdicts, jobs.Classify(ctx, job, err))
			mu.Unlock()
			return err
		}
		id := h.enqueue(rvProfile{Name: "x"})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{Middleware: []jobs.Middleware{mw}}).Throttled)
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		waited := j.RunAt.Sub(h.clock.Now())
		require.Equal(t, 5*time.Minute, waited, "the worker waits the HTTP date on its clock (held)")
		require.Len(t, verdicts, 1)
		require.Equal(t, jobs.OutcomeThrottled, verdicts[0].Outcome)
		require.Equal(t, waited, verdicts[0].Wait, "Classify's Wait should be the wait the worker applies")
	})
}
