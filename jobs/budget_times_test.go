package jobs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type budgetTimesJob struct{ N int }

func (budgetTimesJob) Kind() string { return "budget_times" }

type budgetTimesUnlimited struct{ N int }

func (budgetTimesUnlimited) Kind() string { return "budget_times_unlimited" }

// past2262 is after the last time a rate-limit budget's nanoseconds hold
// (2262-04-11T23:47:16Z).
var past2262 = time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC)

// registerBudgetTimes registers budget_times with a rate limit of one an
// hour on "api", and budget_times_unlimited, which has none, and returns how many times
// budget_times ran.
func registerBudgetTimes(t *testing.T, h *harness) *atomic.Int32 {
	var runs atomic.Int32
	require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[budgetTimesJob]) error {
		runs.Add(1)
		return nil
	}, jobs.RateLimit(ratelimit.Limit[budgetTimesJob]{To: 1, Per: time.Hour, Key: "api"})))
	require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[budgetTimesUnlimited]) error { return nil }))
	return &runs
}

// A budget keeps its times in nanoseconds since 1970, which an int64
// holds until 2262-04-11. A rate-limited job scheduled past that used to
// be accepted, and parked for ever once its time came (the budget's now
// had wrapped round to 1677). It is refused at enqueue, naming what put
// it there and the budget; a job no budget decides still goes up to the
// year 9999.
func TestARateLimitedJobPast2262IsRefusedAtEnqueue(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		registerBudgetTimes(t, h)
		require.NoError(t, h.reg.LimitQueue("sms", ratelimit.QueueLimit{To: 10, Per: time.Second}))
		for _, c := range []struct {
			args jobs.Args
			opts []jobs.EnqueueOption
			want []string
		}{
			{budgetTimesJob{}, []jobs.EnqueueOption{jobs.RunAt(past2262)}, []string{"RunAt puts the run time at 2263-01-01T00:00:00Z", "budget_times/api"}},
			{budgetTimesJob{}, []jobs.EnqueueOption{jobs.RunAt(engine.MaxLimitedRunAt.Add(time.Nanosecond))}, []string{"RunAt", "after 2262-04-11T23:47:16Z"}},
			{budgetTimesJob{}, []jobs.EnqueueOption{jobs.Delay(past2262.Sub(h.clock.Now()))}, []string{"Delay puts the run time", "budget_times/api"}},
			// A kind without a limit of its own, in a limited queue.
			{budgetTimesUnlimited{}, []jobs.EnqueueOption{jobs.RunAt(past2262), jobs.Queue("sms")}, []string{"RunAt", "@queue/sms"}},
		} {
			_, err := h.client.Enqueue(ctx, c.args, c.opts...)
			require.Error(t, err)
			for _, w := range c.want {
				require.ErrorContains(t, err, w)
			}
			require.ErrorContains(t, err, "rate-limit budget")
		}
		require.Zero(t, countAllJobs(t, h.store), "nothing is written")

		// The last time a budget holds is taken, and a job no budget
		// decides may run as late as ever.
		last := h.job(h.enqueue(budgetTimesJob{}, jobs.RunAt(engine.MaxLimitedRunAt)))
		require.Equal(t, engine.MaxLimitedRunAt, last.RunAt)
		far := h.job(h.enqueue(budgetTimesUnlimited{}, jobs.RunAt(past2262)))
		require.Equal(t, past2262, far.RunAt)

		// On a clock past it, a rate-limited job is refused too.
		h.clock.Set(past2262)
		_, err := h.client.Enqueue(ctx, budgetTimesJob{N: 1})
		require.ErrorContains(t, err, "the clock puts the run time at 2263-01-01T00:00:00Z")
	})
}

// A clock past 2262 (a host's or a database's, centuries off) used to
// read as 1677 in a budget: every rate-limited job was parked, and explain
// estimated its start in 1970. Past the last time a budget holds, rate
// limits are not decided: a claim of rate-limited jobs fails with an error
// that says why (wrapping jobs.ErrClockPastBudgets), writing nothing, and
// explain no longer estimates a start long past.
func TestAClockPast2262DecidesNoRateLimitAndSaysSo(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		runs := registerBudgetTimes(t, h)
		parked := make([]int64, 3)
		for i := range parked {
			parked[i] = h.enqueue(budgetTimesJob{N: i})
		}
		h.drain(jobs.WorkerConfig{})
		require.Equal(t, int32(1), runs.Load(), "one an hour")
		parked = parked[1:]
		for _, id := range parked {
			require.Equal(t, engine.StateParked, h.job(id).State)
		}

		h.clock.Set(past2262)
		e, err := h.client.Explain(ctx, parked[1])
		require.NoError(t, err)
		require.Zero(t, e.EstimatedStart, "explain estimated a start at %s", e.EstimatedStart)
		require.Contains(t, e.EstimateBasis, "the budget admits nothing before the end of the times it holds (2262-04-11T23:47:16Z)")

		_, err = h.worker(jobs.WorkerConfig{}).Drain(ctx)
		require.ErrorContains(t, err, "the clock reads past the last time a rate-limit budget holds (2263-01-01T00:00:00Z, after 2262-04-11T23:47:16Z)")
		require.ErrorIs(t, err, jobs.ErrClockPastBudgets)
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		_, err = d.Tick(ctx)
		require.ErrorContains(t, err, "the clock reads past the last time a rate-limit budget holds")
		require.ErrorIs(t, err, jobs.ErrClockPastBudgets)
		require.Equal(t, int32(1), runs.Load())
		for _, id := range parked {
			require.Equal(t, engine.StateParked, h.job(id).State, "nothing is decided")
		}

		// Once the clock is right again, the budget goes on as it was.
		h.clock.Set(t0.Add(2 * time.Hour))
		tickAndDrain(t, h)
		require.Equal(t, int32(2), runs.Load())
	})
}

// A RetryAfter on a clock past 2262 used to fail the write of the whole
// batch of results (its budget's hold could not be decided), and the
// worker tried again for ever: no result of the batch was written. The
// job now waits as asked without holding back its budget, and the others'
// results are written with it.
func TestARetryAfterOnAClockPast2262StillWritesTheBatch(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var runs atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[budgetTimesJob]) error {
			runs.Add(1)
			if j.Args.N == 0 {
				h.clock.Set(past2262)
				return jobs.RetryAfter(time.Minute)
			}
			return nil
		}, jobs.RateLimit(ratelimit.Limit[budgetTimesJob]{To: 1, Per: time.Hour, Key: "api"})))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[budgetTimesUnlimited]) error { return nil }))
		other := h.enqueue(budgetTimesUnlimited{})
		throttled := h.enqueue(budgetTimesJob{})

		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := h.worker(jobs.WorkerConfig{}).Drain(dctx)
		if err != nil {
			// A claim the Drain makes after the batch, on the clock the
			// handler moved, decides no rate limit and says so; the
			// batch's results are written all the same.
			require.ErrorIs(t, err, jobs.ErrClockPastBudgets)
		} else {
			require.Equal(t, 1, res.Completed)
			require.Equal(t, 1, res.Throttled)
		}
		require.Equal(t, engine.StateCompleted, h.job(other).State)
		j := h.job(throttled)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, past2262.Add(time.Minute), j.RunAt, "it waits as asked")

		// The budget was not held back: an hour after its one admission,
		// it admits again.
		h.clock.Set(t0.Add(2 * time.Hour))
		h.enqueue(budgetTimesJob{N: 1})
		tickAndDrain(t, h)
		require.Equal(t, int32(2), runs.Load())
	})
}
