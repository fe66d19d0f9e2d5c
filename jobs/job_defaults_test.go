package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md: "After MaxAttempts (25 by default) the job is kept as
// failed", and "A job's timeout (WorkerConfig.JobTimeout, 1 minute by
// default, or the kind's jobs.Timeout) cancels the handler's context; the
// attempt fails with `job timed out after …`": the defaults a new user
// gets, where other tests set their own values.
func TestAJobGets25AttemptsAndAMinuteByDefault(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, _ *jobs.Job[noop]) error {
			<-ctx.Done() // a handler stuck on a call that honours its context
			return ctx.Err()
		}))
		id := h.enqueue(noop{})
		require.Equal(t, 25, h.job(id).MaxAttempts)

		// The heartbeat (60 s by default) is moved out of the way: the one
		// timer due at a minute is then the run's timeout.
		w := h.worker(jobs.WorkerConfig{HeartbeatInterval: time.Hour, DeadAfter: 3 * time.Hour})
		done := make(chan jobs.DrainResult, 1)
		go func() {
			res, err := w.Drain(context.Background())
			assertNoErr(t, err)
			done <- res
		}()
		select {
		case <-h.clock.WaitForTimerAt(t0.Add(time.Minute)):
		case <-time.After(30 * time.Second):
			t.Fatal("no timer for the default timeout of a minute")
		}
		h.clock.Advance(time.Minute)
		require.Equal(t, 1, receive(t, done, 1)[0].Retried)
		j := h.job(id)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, "job timed out after 1m0s: context canceled", j.LastError)
	})
}
