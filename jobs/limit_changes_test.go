package jobs_test

import (
	"context"
	"fmt"
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

// The tests of docs/rate-limits.md, "Changing a limit" and "Changing a
// limit without a restart": what becomes of jobs already waiting when a
// limit is loosened, tightened or paused, by an override or a deploy.

// steps runs n rounds of a dispatcher tick and a drain, advancing the fake
// clock by by after each, and stops early once no job is left to finish:
// with every job completed, failed or cancelled, no later round could
// start one, and the rounds that ran on (half of some tests' rounds) only
// cost time.
func steps(t *testing.T, h *harness, d *dispatcher.Dispatcher, drain func(), n int, by time.Duration) {
	t.Helper()
	for range n {
		_, err := d.Tick(context.Background())
		require.NoError(t, err)
		drain()
		h.clock.Advance(by)
		if countJobs(t, h, `state NOT IN ('completed', 'failed', 'cancelled')`) == 0 {
			return
		}
	}
}

// startRecorder records the times jobs start, from any goroutine.
func startRecorder() (record func(time.Time), starts func() []time.Time) {
	var mu sync.Mutex
	var s []time.Time
	return func(t time.Time) { mu.Lock(); s = append(s, t); mu.Unlock() },
		func() []time.Time { mu.Lock(); defer mu.Unlock(); return append([]time.Time(nil), s...) }
}

// since returns the times at or after from.
func since(ts []time.Time, from time.Time) []time.Time {
	var out []time.Time
	for _, t := range ts {
		if !t.Before(from) {
			out = append(out, t)
		}
	}
	return out
}

// registerSMS registers sms with a global limit of to per per on reg,
// recording each start on the harness's clock.
func registerSMS(t *testing.T, h *harness, reg *jobs.Registry, to int, per time.Duration, record func(time.Time)) {
	t.Helper()
	require.NoError(t, jobs.Register(reg, func(context.Context, *jobs.Job[sms]) error { record(h.clock.Now()); return nil },
		jobs.RateLimit(ratelimit.Limit[sms]{To: to, Per: per, Key: "global"})))
}

// budget returns the stored budget of key.
func budget(t *testing.T, h *harness, key string) engine.BudgetInfo {
	t.Helper()
	bs, err := h.store.ListBudgets(context.Background())
	require.NoError(t, err)
	for _, b := range bs {
		if b.Name == key {
			return b
		}
	}
	t.Fatalf("no budget %s", key)
	return engine.BudgetInfo{}
}

// An override applies "from the next claim, under the rules for a changed
// limit: ... a tighter one counts it in its own intervals too", and "a window
// that spans the change can hold more than the new limit allows, until
// one new Per has passed". Jobs deferred under the old limit come back and
// run, never more than the new To in a window of the new Per once that
// Per has passed.
func TestATighterOverrideHoldsForJobsAlreadyWaiting(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		record, starts := startRecorder()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { record(h.clock.Now()); return nil },
			jobs.RateLimit(ratelimit.Limit[sms]{To: 100, Per: time.Second, Burst: 10, Key: "global"})))
		for range 60 {
			h.enqueue(sms{})
		}
		require.Equal(t, 10, h.drain(jobs.WorkerConfig{}).Completed)
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "sms", To: 2, Per: time.Second, Burst: 1}, h.clock.Now()))
		change := h.clock.Now()
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{}) }, 500, 100*time.Millisecond)
		all := starts()
		require.Len(t, all, 60, "every job ran")
		require.LessOrEqual(t, ratelimit.BusiestWindow(since(all, change.Add(time.Second)), time.Second), 2,
			"after one new Per, no window of 1s holds more than the new To")
	})
}

// A tighter override over a backlog that is parked: the budget counts its
// debt in the new limit's intervals (its slot cursor untouched), now
// charged under the new limit, so the dispatcher hands the parked jobs
// slots at the new pace; after one new Per no window holds more than the
// new To.
func TestATighterOverrideCountsAParkedBacklogsDebtInItsIntervals(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		record, starts := startRecorder()
		registerSMS(t, h, h.reg, 1, time.Minute, record)
		for range 12 {
			h.enqueue(sms{})
		}
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		before := budget(t, h, "sms/global")
		require.Equal(t, 6, before.Parked, "slots at 1 to 5 minutes, the rest parked")

		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "sms", To: 1, Per: 2 * time.Minute, Burst: 1}, h.clock.Now()))
		change := h.clock.Now()
		h.drain(jobs.WorkerConfig{})
		after := budget(t, h, "sms/global")
		require.Equal(t, (2 * time.Minute).Nanoseconds(), after.IntervalNS, "charged under the new limit")
		debt := before.TAT - change.UnixNano()
		require.Positive(t, debt)
		require.Equal(t, change.UnixNano()+2*debt, after.TAT, "the debt of one a minute counted in intervals of two minutes")
		require.Equal(t, before.NextSlot, after.NextSlot, "the slot cursor as left")

		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{}) }, 120, 30*time.Second) // an hour
		all := starts()
		require.Len(t, all, 12, "every job ran")
		require.LessOrEqual(t, ratelimit.BusiestWindow(since(all, change.Add(2*time.Minute)), 2*time.Minute), 1,
			"after one new Per, no window of 2m holds more than the new To")
	})
}

// "Jobs already waiting keep their slots, and new waiting jobs queue after
// them, so a backlog speeds up within the horizon (5 minutes)". Parked jobs
// included.
func TestALooserOverrideSpeedsUpParkedJobsWithinTheHorizon(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		record, starts := startRecorder()
		registerSMS(t, h, h.reg, 1, time.Minute, record)
		for range 30 {
			h.enqueue(sms{})
		}
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "sms", To: 1, Per: time.Second, Burst: 1}, h.clock.Now()))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{}) }, 4*60, 2*time.Second) // 8 minutes
		all := starts()
		require.Len(t, all, 30, "a backlog of 29 at one a second is done within the horizon plus half a minute")
		require.LessOrEqual(t, ratelimit.BusiestWindow(all, time.Second), 1)
	})
}

// "because no slot is promised more than 5 minutes ahead, a loosened limit
// or waiting jobs that were cancelled take effect within 5 minutes", and
// "a backlog speeds up within the horizon (5 minutes)". Here the old
// limit's interval (an hour) is longer than the horizon, so the whole
// backlog is parked and no claim touches its budget: the worker that reads
// the override hands the new limit to it.
func TestALooserOverrideSpeedsUpABacklogParkedPastTheHorizon(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		record, starts := startRecorder()
		registerSMS(t, h, h.reg, 1, time.Hour, record)
		for range 20 {
			h.enqueue(sms{})
		}
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, 19, budget(t, h, "sms/global").Parked)
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "sms", To: 1, Per: time.Second, Burst: 1}, h.clock.Now()))
		change := h.clock.Now()
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{}) }, 330, time.Second) // 5.5 minutes
		all := starts()
		require.Len(t, all, 20, "19 jobs still wait, 5.5 minutes after the limit went from 1/h to 1/s")
		require.LessOrEqual(t, all[len(all)-1].Sub(change), engine.DefaultHorizon+19*time.Second,
			"the backlog starts within the horizon and drains at the new pace")
		require.LessOrEqual(t, ratelimit.BusiestWindow(all, time.Second), 1, "never more than the new To in a window of the new Per")
	})
}

// A deploy that loosens a declared limit: the new worker, with a new
// registry, hands the new limit at start to a backlog whose jobs are all
// parked, which then drains within the horizon at the new pace.
func TestALooserDeclaredLimitReachesAParkedBacklogAfterARestart(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		record, starts := startRecorder()
		registerSMS(t, h, h.reg, 1, time.Hour, record)
		for range 20 {
			h.enqueue(sms{})
		}
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, 19, budget(t, h, "sms/global").Parked)

		// The deploy: 1 a second.
		deployed := jobs.NewRegistry()
		registerSMS(t, h, deployed, 1, time.Second, record)
		w, err := jobs.NewWorker(testdb.Public(h.store), deployed, jobs.WorkerConfig{Clock: h.clock, Logger: quiet()})
		require.NoError(t, err)
		change := h.clock.Now()
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		drain := func() {
			_, err := w.Drain(ctx)
			require.NoError(t, err)
		}
		steps(t, h, d, drain, 330, time.Second) // 5.5 minutes
		all := starts()
		require.Len(t, all, 20, "the parked backlog ran under the deployed limit")
		require.LessOrEqual(t, all[len(all)-1].Sub(change), engine.DefaultHorizon+19*time.Second)
		require.LessOrEqual(t, ratelimit.BusiestWindow(all, time.Second), 1)
	})
}

// The bound holds across a looser change: the debt the budget inherits is
// capped at Burst intervals of the new limit, and the parked backlog is
// handed the new slots from the horizon on, so no window of the new Per
// holds more than the new To, the burst spent before the change included.
func TestTheNewBoundHoldsAcrossALooserChange(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		record, starts := startRecorder()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { record(h.clock.Now()); return nil },
			jobs.RateLimit(ratelimit.Limit[sms]{To: 10, Per: time.Minute, Burst: 10, Key: "global"}))) // 10 at once, then 1 a minute
		for range 40 {
			h.enqueue(sms{})
		}
		require.Equal(t, 10, h.drain(jobs.WorkerConfig{}).Completed)
		require.Positive(t, budget(t, h, "sms/global").Parked)
		h.clock.Advance(30 * time.Second)
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "sms", To: 10, Per: 10 * time.Second, Burst: 10}, h.clock.Now()))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{}) }, 330, 2*time.Second) // 11 minutes
		all := starts()
		require.Len(t, all, 40, "every job ran")
		require.LessOrEqual(t, ratelimit.BusiestWindow(all, 10*time.Second), 10, "no window of the new Per holds more than the new To")
	})
}

// A looser override over more budgets with parked jobs than one
// transaction changes (engine.DefaultRepriceBatch): every one of them gets
// the new limit, and every backlog drains within the horizon.
func TestALooserOverrideReachesMoreParkedBudgetsThanOneBatch(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[keyed]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[keyed]{To: 1, Per: time.Hour, Key: func(a keyed) any { return a.Key }})))
		n := engine.DefaultRepriceBatch + 20
		items := make([]jobs.Item, 0, 2*n)
		for i := range n {
			items = append(items, jobs.Item{Args: keyed{Key: fmt.Sprint(i)}}, jobs.Item{Args: keyed{Key: fmt.Sprint(i)}})
		}
		_, err := h.client.EnqueueMany(ctx, items)
		require.NoError(t, err)
		require.Equal(t, n, h.drain(jobs.WorkerConfig{Concurrency: 100}).Completed, "one per budget; the other parks")

		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "keyed", To: 1, Per: time.Second, Burst: 1}, h.clock.Now()))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		done := 0
		steps(t, h, d, func() { done += h.drain(jobs.WorkerConfig{Concurrency: 100}).Completed }, 14, 30*time.Second) // 7 minutes
		require.Equal(t, n, done, "every parked job ran within the horizon")
		bs, err := h.store.ListBudgets(ctx)
		require.NoError(t, err)
		require.Len(t, bs, n)
		for _, b := range bs {
			require.Equal(t, time.Second.Nanoseconds(), b.IntervalNS, "%s: charged under the override", b.Name)
		}
	})
}

// "To: 0 pauses the limit. Nothing it covers is admitted ... When the probe
// comes back under a limit that admits it again, the dispatcher hands the
// parked jobs slots at the new rate." Here the pause is an override set
// while jobs hold slots, then cleared.
func TestAPausingOverrideHoldsSlottedJobsAndClearingItResumes(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		record, starts := startRecorder()
		registerSMS(t, h, h.reg, 10, time.Second, record)
		for range 20 {
			h.enqueue(sms{})
		}
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "sms", To: 0, Per: time.Second}, h.clock.Now()))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		// 10 minutes paused, and 7 after, in steps of a few seconds: every
		// waiting job comes due (and is held again) at least once a
		// step, as with steps of one, at a tenth of the rounds.
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{}) }, 60, 10*time.Second)
		require.Len(t, starts(), 1, "nothing admitted while paused")
		st, err := h.store.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(19), st[0].Counts[engine.StateScheduled]+st[0].Counts[engine.StateParked], "nothing lost")
		require.NoError(t, h.store.ClearOverride(ctx, "sms"))
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{}) }, 7*12, 5*time.Second)
		require.Len(t, starts(), 20, "resumed within the horizon")
	})
}
