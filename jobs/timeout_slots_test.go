package jobs_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

type r7slow struct{ Account, N int }

func (r7slow) Kind() string { return "r7slow" }

// "A job's timeout (… the kind's jobs.Timeout) cancels the handler's
// context; the attempt fails with `job timed out after …` if the handler
// returns an error." A handler that ignores the cancellation and returns
// nil later completes; one that returns jobs.Cancel after its timeout is
// cancelled. Either way its concurrency slot goes to the blocked job.
func TestATimedOutHandlerThatIgnoresItsContextGivesItsSlotBackWhenItReturns(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan int, 4)
		release := make(chan struct{}, 2)
		var ran atomic.Int32
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, j *jobs.Job[r7slow]) error {
			ran.Add(1)
			if j.Args.N == 3 {
				return nil
			}
			started <- j.Args.N
			<-ctx.Done() // the timeout fired
			<-release    // and then it goes on regardless
			if j.Args.N == 2 {
				return jobs.Cancel(ctx.Err())
			}
			return nil
		}, jobs.Timeout(10*time.Second),
			jobs.ConcurrencyLimit(concurrency.Limit[r7slow]{Key: func(a r7slow) any { return a.Account }})))
		a := h.enqueue(r7slow{Account: 1, N: 1})
		b := h.enqueue(r7slow{Account: 2, N: 2})
		c := h.enqueue(r7slow{Account: 1, N: 3})
		require.Equal(t, engine.StateBlocked, h.job(c).State)
		go func() {
			// Drain runs one job at a time: each times out, then goes on.
			for range 2 {
				receive(t, started, 1)
				h.clock.Advance(10 * time.Second)
				release <- struct{}{}
			}
		}()
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 2, res.Completed)
		require.Equal(t, 1, res.Cancelled)
		require.Equal(t, engine.StateCompleted, h.job(a).State)
		require.Equal(t, engine.StateCancelled, h.job(b).State)
		require.Equal(t, engine.StateCompleted, h.job(c).State)
		sems, err := h.store.ListSemaphores(context.Background())
		require.NoError(t, err)
		for _, s := range sems {
			require.Zero(t, s.Held, "%+v", s)
		}
	})
}

// An operator's cancel of a blocked job (docs/concurrency.md: a slot is
// "given back exactly once"; the cancelled blocked job held none): the
// key's holder finishing hands its slot to the next blocked job, not to
// the cancelled one, and no slot stays taken.
func TestCancellingABlockedJobKeepsNoSlot(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[r7slow]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[r7slow]{Key: func(a r7slow) any { return a.Account }})))
		holder := h.enqueue(r7slow{Account: 1, N: 1})
		blocked := h.enqueue(r7slow{Account: 1, N: 2})
		next := h.enqueue(r7slow{Account: 1, N: 3})
		_, err := h.store.CancelJobs(ctx, engine.At(h.clock.Now()), []int64{blocked}, "")
		require.NoError(t, err)
		j := h.job(blocked)
		require.Equal(t, engine.StateCancelled, j.State)
		require.False(t, j.HoldsSlot)
		require.Equal(t, 2, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, engine.StateCompleted, h.job(holder).State)
		require.Equal(t, engine.StateCompleted, h.job(next).State)
		sems, err := h.store.ListSemaphores(ctx)
		require.NoError(t, err)
		require.Zero(t, sems[0].Held)
		_, err = h.store.RetryJobs(ctx, engine.At(h.clock.Now()), []int64{blocked})
		require.NoError(t, err)
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		sems, err = h.store.ListSemaphores(ctx)
		require.NoError(t, err)
		require.Zero(t, sems[0].Held)
	})
}
