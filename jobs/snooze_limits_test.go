package jobs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

var errTest = errors.New("r7 failure")

// "return jobs.Snooze(d) runs it again after d without counting the
// attempt"; "After MaxAttempts (25 by default) the job is kept as failed."
// A job on its last attempt that snoozes (any number of times, by 0) still
// has that attempt: its next failure fails it for good at attempt
// MaxAttempts, and its kept attempts are exactly its failed runs.
func TestASnoozeOnTheLastAttemptKeepsThatAttempt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var runs atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[flaky]) error {
			n := runs.Add(1)
			switch {
			case j.Attempt < 2:
				return errTest
			case n < 5:
				return jobs.Snooze(0)
			}
			return errTest
		}, jobs.MaxAttempts(2), jobs.Backoff(func(int) time.Duration { return 0 })))
		id := h.enqueue(flaky{})
		h.drain(jobs.WorkerConfig{})
		j := h.job(id)
		require.Equal(t, engine.StateFailed, j.State)
		require.Equal(t, 2, j.Attempt)
		require.Equal(t, int32(5), runs.Load(), "one failure, three snoozes by 0, the last failure")
		info, err := h.store.GetJob(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, 2, info.MaxAttempts)
	})
}

// A job that holds a concurrency slot and snoozes keeps it while it waits
// (docs/concurrency.md); an operator's cancel of the snoozed job then gives
// the slot to the key's blocked job at once ("sluice cancel ID on a job
// holding a slot gives the slot to the next blocked job").
func TestCancellingASnoozedSlotHolderHandsItsSlotOn(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[accountJob]) error {
			if j.Args.N == 1 {
				return jobs.Snooze(100 * 365 * 24 * time.Hour)
			}
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: func(a accountJob) any { return a.Account }})))
		a := h.enqueue(accountJob{Account: 1, N: 1})
		b := h.enqueue(accountJob{Account: 1, N: 2})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Snoozed)
		require.True(t, h.job(a).HoldsSlot)
		require.Equal(t, engine.StateBlocked, h.job(b).State)
		_, err := h.store.CancelJobs(ctx, engine.At(h.clock.Now()), []int64{a}, "")
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, h.job(b).State)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		sems, err := h.store.ListSemaphores(ctx)
		require.NoError(t, err)
		require.Zero(t, sems[0].Held)
	})
}
