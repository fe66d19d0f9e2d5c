package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// docs/rate-limits.md, "Changing a limit": "Removing a limit (or Key: nil)
// lets the kind's waiting jobs be claimed unchecked when they next come
// back, within the horizon. Parked jobs keep getting slots at the budget's
// last rate until they are all out."
//
// The deploy that removes the kind's (only) limit registers the kind with
// no RateLimit at all.
func TestRemovingTheOnlyLimitLetsWaitingJobsRun(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[sms]{To: 1, Per: time.Minute, Key: "global"})))
		ids := make([]int64, 10)
		for i := range ids {
			ids[i] = h.enqueue(sms{})
		}
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 1, res.Completed)

		// The new deploy: the same kind, no limit.
		var mu sync.Mutex
		ran := 0
		reg2 := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg2, func(context.Context, *jobs.Job[sms]) error { mu.Lock(); ran++; mu.Unlock(); return nil }))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		drain := func() {
			w, err := jobs.NewWorker(testdb.Public(h.store), reg2, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
			require.NoError(t, err)
			_, err = w.Drain(ctx)
			require.NoError(t, err)
		}
		steps(t, h, d, drain, 30, time.Minute) // half an hour: far past the horizon and the old rate
		counts := map[engine.State]int{}
		for _, id := range ids {
			counts[h.job(id).State]++
		}
		require.Equal(t, map[engine.State]int{engine.StateCompleted: 10}, counts,
			"the 9 jobs that waited on the removed limit never ran (ran %d)", ran)
	})
}

// The same with a limit on another kind still registered: the limit is
// removed from this kind only.
func TestRemovingOneKindsLimitLetsWaitingJobsRun(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[sms]{To: 1, Per: time.Minute, Key: "global"})))
		ids := make([]int64, 10)
		for i := range ids {
			ids[i] = h.enqueue(sms{})
		}
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)

		reg2 := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg2, func(context.Context, *jobs.Job[sms]) error { return nil }))
		require.NoError(t, jobs.Register(reg2, func(context.Context, *jobs.Job[otp]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[otp]{To: 1, Per: time.Minute, Key: "global"})))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		drain := func() {
			w, err := jobs.NewWorker(testdb.Public(h.store), reg2, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
			require.NoError(t, err)
			_, err = w.Drain(ctx)
			require.NoError(t, err)
		}
		steps(t, h, d, drain, 30, time.Minute)
		counts := map[engine.State]int{}
		for _, id := range ids {
			counts[h.job(id).State]++
		}
		require.Equal(t, map[engine.State]int{engine.StateCompleted: 10}, counts)
	})
}

// A running worker whose registry declares no limit at all takes the jobs
// that carry a budget key at its polls: those a removed limit left ready,
// or that an enqueuer of the previous version keyed. Between polls its
// claims stay plain.
func TestAWorkerWithNoLimitTakesKeyedJobsAtItsPoll(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[sms]{To: 1, Per: time.Minute, Key: "global"})))
		ran := make(chan int64, 10)
		reg2 := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg2, func(_ context.Context, j *jobs.Job[sms]) error { ran <- j.ID; return nil }))
		w, err := jobs.NewWorker(testdb.Public(h.store), reg2, jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), PollInterval: time.Second})
		require.NoError(t, err)
		stop := h.run(w)
		defer stop()
		<-h.clock.WaitForTimerAt(h.clock.Now().Add(time.Second)) // started: its first claim found nothing

		id := h.enqueue(sms{}) // keyed, by an enqueuer that still declares the limit
		for i := 0; ; i++ {
			require.Less(t, i, 10, "the keyed job never ran")
			<-h.clock.WaitForTimerAt(h.clock.Now().Add(time.Second))
			h.clock.Advance(time.Second) // the poll
			select {
			case got := <-ran:
				require.Equal(t, id, got)
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
}
