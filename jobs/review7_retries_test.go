package jobs_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

var errTest = errors.New("r7 failure")

type r7upstream struct{ N int }

func (r7upstream) Kind() string { return "r7upstream" }

// docs/guarantees.md, "Retries, cancel and snooze": "return
// jobs.RetryAfterResponse(resp, fallback) (or jobs.RetryAfter(d)) after an
// upstream 429 runs it again after the upstream's wait without counting
// the attempt, holds back every budget the job ran under"; retryafter.go:
// a Retry-After of more seconds than a Duration holds is "the longest
// wait, which MaxRetryAfter then caps". A worker whose MaxRetryAfter is
// the longest Duration (no cap: NewWorker takes any positive value) and an
// upstream asking for a very long wait: the budget's push is now (ns since
// 1970, about 1.77e18 in 2026) plus the wait, which wraps round to a
// negative time, so the budget is not held back at all and the next job
// on it is admitted at once.
func TestA429WithAVeryLongWaitStillHoldsTheBudgetBack(t *testing.T) {
	for _, c := range []struct {
		name          string
		wait, maxWait time.Duration
	}{
		{"a day under the default cap of an hour", 24 * time.Hour, 0},                              // control: capped at 1h
		{"the longest wait, uncapped", time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)}, // wraps
		{"250 years, uncapped", 250 * 365 * 24 * time.Hour, time.Duration(math.MaxInt64)},          // wraps
	} {
		t.Run(c.name, func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				var runs atomic.Int32
				require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[r7upstream]) error {
					runs.Add(1)
					if j.Args.N == 1 {
						return jobs.RetryAfter(c.wait)
					}
					return nil
				}, jobs.RateLimit(ratelimit.Limit[r7upstream]{To: 100, Per: time.Minute, Burst: 100, Key: "api"})))
				cfg := jobs.WorkerConfig{MaxRetryAfter: c.maxWait}
				first := h.enqueue(r7upstream{N: 1})
				require.Equal(t, 1, h.drain(cfg).Throttled)
				require.Equal(t, engine.StateScheduled, h.job(first).State)

				second := h.enqueue(r7upstream{N: 2})
				res := h.drain(cfg)
				require.Zero(t, res.Completed, "a job on the budget the upstream refused ran at once: the budget was not held back")
				require.Equal(t, int32(1), runs.Load())
				require.NotEqual(t, engine.StateCompleted, h.job(second).State)
			})
		})
	}
}

// probe: passes
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

// probe: passes
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
