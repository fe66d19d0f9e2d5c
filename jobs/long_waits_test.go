package jobs_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// Waits longer than a budget's nanosecond times reach (past 2262) hold as
// long as they reach, rather than wrapping round to a time long past.

type longWait struct{ N int }

func (longWait) Kind() string { return "long_wait" }

// "return jobs.RetryAfterResponse(resp, fallback) (or jobs.RetryAfter(d))
// after an upstream 429 … holds back every budget the job ran under"
// (docs/guarantees.md), however long the wait: with MaxRetryAfter the
// longest Duration (no cap), now (ns since 1970) plus a wait of more than
// about 236 years used to wrap round to a negative time, so the budget was
// not held back at all and the next job on it ran at once.
func TestA429WithAWaitPastWhatTimesReachStillHoldsTheBudgetBack(t *testing.T) {
	for _, c := range []struct {
		name          string
		wait, maxWait time.Duration
	}{
		{"a day under the default cap of an hour", 24 * time.Hour, 0},
		{"the longest wait, uncapped", time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)},
		{"250 years, uncapped", 250 * 365 * 24 * time.Hour, time.Duration(math.MaxInt64)},
	} {
		t.Run(c.name, func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				var runs atomic.Int32
				require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[longWait]) error {
					runs.Add(1)
					if j.Args.N == 1 {
						return jobs.RetryAfter(c.wait)
					}
					return nil
				}, jobs.RateLimit(ratelimit.Limit[longWait]{To: 100, Per: time.Minute, Burst: 100, Key: "api"})))
				cfg := jobs.WorkerConfig{MaxRetryAfter: c.maxWait}
				first := h.enqueue(longWait{N: 1})
				require.Equal(t, 1, h.drain(cfg).Throttled)
				j := h.job(first)
				require.Equal(t, engine.StateScheduled, j.State)
				require.True(t, j.RunAt.After(t0.Add(time.Hour-time.Second)), "the job waits too: %s", j.RunAt)

				second := h.enqueue(longWait{N: 2})
				res := h.drain(cfg)
				require.Zero(t, res.Completed, "a job on the budget the upstream refused ran at once: the budget was not held back")
				require.Equal(t, int32(1), runs.Load())
				require.NotEqual(t, engine.StateCompleted, h.job(second).State)
			})
		})
	}
}

// "return jobs.Snooze(d) runs it again after d": a snooze for the longest
// Duration (about 292 years) keeps the job waiting that long, its run time
// stored in microseconds without wrapping.
func TestASnoozeForTheLongestWaitKeepsTheJobWaiting(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[longWait]) error {
			return jobs.Snooze(time.Duration(math.MaxInt64))
		}))
		id := h.enqueue(longWait{N: 1})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Snoozed)
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		require.True(t, j.RunAt.After(t0.Add(290*365*24*time.Hour)), "snoozed until %s", j.RunAt)
		require.Zero(t, h.drain(jobs.WorkerConfig{}).Ran())
	})
}

// A worker's Horizon is any positive Duration: the longest one hands out
// rate-limit slots as far ahead as the times reach, instead of wrapping
// round to a horizon long past that parks every deferred job.
func TestTheLongestHorizonStillHandsOutSlots(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[longWait]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[longWait]{To: 1, Per: time.Minute, Key: "api"})))
		h.enqueue(longWait{N: 1})
		second := h.enqueue(longWait{N: 2})
		res := h.drain(jobs.WorkerConfig{Horizon: time.Duration(math.MaxInt64)})
		require.Equal(t, 1, res.Completed)
		j := h.job(second)
		require.Equal(t, engine.StateScheduled, j.State, "the deferred job gets the next slot, a minute on")
		require.Equal(t, t0.Add(time.Minute), j.RunAt)
	})
}
