package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
	"github.com/sluicequeue/sluice/store"
)

type throttled struct{ N int }

func (throttled) Kind() string { return "throttled" }

func (h *harness) explain(id int64) *jobs.Explanation {
	h.t.Helper()
	e, err := h.client.Explain(context.Background(), id)
	require.NoError(h.t, err)
	return e
}

func TestExplainARateLimitedBacklog(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		// 10 per second, burst 1: one slot every 100ms. The horizon of 1s
		// hands out 10 slots and parks the rest.
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[throttled]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[throttled]{To: 10, Per: time.Second, Key: "global"})))
		var ids []int64
		for i := range 40 {
			ids = append(ids, h.enqueue(throttled{N: i}))
		}
		cfg := jobs.WorkerConfig{Horizon: time.Second}
		res := h.drain(cfg)
		require.Equal(t, 1, res.Completed)

		e := h.explain(ids[3])
		require.Equal(t, jobs.ReasonRateLimited, e.Reason, e.Summary)
		require.Equal(t, engine.StateScheduled, e.State)
		require.Len(t, e.Limits, 1)
		l := e.Limits[0]
		require.True(t, l.Binding)
		require.True(t, l.Declared)
		require.Equal(t, "throttled/global", l.Key)
		require.Equal(t, 10, l.To)
		require.Equal(t, time.Second, l.Per)
		require.Equal(t, 100*time.Millisecond, l.Interval)
		require.Equal(t, e.RunAt, e.EstimatedStart, "a job holding a slot starts at its slot")
		require.Equal(t, t0.Add(300*time.Millisecond), e.RunAt)
		require.Equal(t, engine.Count{N: 2}, *e.Ahead, "the slots of jobs 2 and 3 come first")
		require.Equal(t, 1, e.Deferrals, "the claim deferred it once, to its slot")
		require.Contains(t, e.LastDeferral, "throttled/global")

		deep := ids[35]
		e = h.explain(deep)
		require.Equal(t, jobs.ReasonParked, e.Reason, e.Summary)
		require.Positive(t, e.Limits[0].Parked)
		require.Contains(t, e.Summary, "throttled/global")
		est := e.EstimatedStart
		require.False(t, est.IsZero(), e.EstimateBasis)

		// Run the backlog on the fake clock, 20ms at a time, until the
		// deep job has started; its estimate must be within 5% of the
		// wait it actually had.
		for i := 0; i < 400 && h.job(deep).State != engine.StateCompleted; i++ {
			h.clock.Advance(20 * time.Millisecond)
			h.drain(cfg)
		}
		got := h.job(deep)
		require.Equal(t, engine.StateCompleted, got.State)
		wait, estWait := got.AttemptedAt.Sub(t0), est.Sub(t0)
		require.InEpsilon(t, wait.Seconds(), estWait.Seconds(), 0.05, "estimated %s, started after %s", estWait, wait)

		// An override on the scope is shown on the limit.
		require.NoError(t, h.store.SetOverride(ctx, store.Override{Target: "throttled", To: 20, Per: time.Second}, t0))
		id := h.enqueue(throttled{N: 99})
		h.drain(cfg)
		e = h.explain(id)
		require.Equal(t, "throttled", e.Limits[0].Override)
		require.Equal(t, 20, e.Limits[0].To)
		require.Contains(t, strings.Join(e.Lines(), "\n"), "overridden on throttled")
	})
}

func TestExplainReadyPausedAndFinished(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var inside *jobs.Explanation
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[noop]) error {
			var err error
			inside, err = h.client.Explain(ctx, j.ID)
			return err
		}))
		a, b, c := h.enqueue(noop{1}), h.enqueue(noop{2}), h.enqueue(noop{3})
		e := h.explain(c)
		require.Equal(t, jobs.ReasonReady, e.Reason)
		require.Equal(t, engine.Count{N: 2}, *e.Ahead)
		require.Contains(t, e.Summary, "waiting for a free worker")
		require.True(t, e.EstimatedStart.IsZero(), "no pace known yet: %s", e.EstimateBasis)
		require.Equal(t, engine.Count{N: 0}, *h.explain(a).Ahead)
		require.Equal(t, t0, h.explain(a).EstimatedStart, "the first job starts as soon as a worker is free")

		require.NoError(t, h.store.PauseQueue(ctx, "default", t0))
		e = h.explain(b)
		require.Equal(t, jobs.ReasonQueuePaused, e.Reason)
		require.True(t, e.QueuePaused)
		require.True(t, e.EstimatedStart.IsZero())
		require.NoError(t, h.store.ResumeQueue(ctx, "default", t0))

		h.drain(jobs.WorkerConfig{})
		require.NotNil(t, inside)
		require.Equal(t, jobs.ReasonRunning, inside.Reason)
		e = h.explain(a)
		require.Equal(t, jobs.ReasonFinished, e.Reason)
		require.Contains(t, e.Summary, "completed")

		// With a pace known (3 finished in the last minute), a ready job
		// behind others gets an estimate from it.
		d, _, f := h.enqueue(noop{4}), h.enqueue(noop{5}), h.enqueue(noop{6})
		_ = d
		e = h.explain(f)
		require.Equal(t, t0.Add(2*20*time.Second), e.EstimatedStart, e.EstimateBasis)

		_, err := h.client.Explain(ctx, 1<<40)
		require.ErrorIs(t, err, engine.ErrNotFound)
		_, err = h.client.Explain(ctx, 0)
		require.ErrorContains(t, err, "not a job id")
	})
}

func TestExplainRetryBlockedAndCoalesced(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error {
			return errors.New("upstream <b>down</b>\nstack line")
		}, jobs.MaxAttempts(3), jobs.Backoff(func(int) time.Duration { return time.Minute })))
		id := h.enqueue(noop{1})
		h.drain(jobs.WorkerConfig{})
		e := h.explain(id)
		require.Equal(t, jobs.ReasonRetryBackoff, e.Reason, e.Summary)
		require.Equal(t, t0.Add(time.Minute), e.EstimatedStart)
		require.Equal(t, 1, e.Attempt)
		require.Contains(t, strings.Join(e.Lines(), "\n"), "last error: upstream <b>down</b> …", "the first line of the error")

		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[email]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[email]{To: 1, Key: func(a email) any { return a.To }})))
		first := h.enqueue(email{To: "a@x"})
		second := h.enqueue(email{To: "a@x"})
		e = h.explain(second)
		require.Equal(t, jobs.ReasonBlocked, e.Reason, e.Summary)
		require.NotNil(t, e.Concurrency)
		require.Equal(t, "email/a@x", e.Concurrency.Key)
		require.Equal(t, []int64{first}, e.Concurrency.Holders)
		require.Equal(t, 1, e.Concurrency.Held)
		require.Equal(t, 1, e.Concurrency.To)
		require.True(t, e.EstimatedStart.IsZero())
		require.True(t, h.explain(first).Concurrency.HoldsSlot)

		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[keyed]) error { return nil },
			jobs.Coalesce(coalesce.Rule[keyed]{Key: func(k keyed) any { return k.Key }, Debounce: time.Minute})))
		cid := h.enqueue(keyed{Key: "k1"})
		e = h.explain(cid)
		require.Equal(t, "keyed/k1", e.CoalesceKey)
		require.Contains(t, strings.Join(e.Lines(), "\n"), "coalescing: it holds key keyed/k1")
	})
}
