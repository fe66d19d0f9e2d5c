package jobs_test

import (
	"context"
	"github.com/sluicequeue/sluice/internal/testdb"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type sms struct{ To string }

func (sms) Kind() string { return "sms" }

type otp struct{ To string }

func (otp) Kind() string { return "otp" }

func TestAQueueLimitThrottlesEveryKindOnIt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var starts []time.Time
		var other int
		record := func() { starts = append(starts, h.clock.Now()) }
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { record(); return nil }, jobs.Queue("sms")))
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[otp]) error {
			if j.Queue == "sms" {
				record()
			} else {
				other++
			}
			return nil
		}, jobs.Queue("sms")))
		require.NoError(t, h.reg.LimitQueue("sms", ratelimit.QueueLimit{To: 2, Per: time.Second, Burst: 2}))
		require.ErrorContains(t, h.reg.LimitQueue("sms", ratelimit.QueueLimit{To: 1, Per: time.Second}), "already limited")
		require.ErrorContains(t, h.reg.LimitQueue("x", ratelimit.QueueLimit{To: 1, Per: 0}), "Per is 0s")
		for i := 0; i < 4; i++ {
			h.enqueue(sms{})
			h.enqueue(otp{})
			h.enqueue(otp{}, jobs.Queue("fast")) // another queue: not limited
		}
		for step := 0; step < 20; step++ {
			h.drain(jobs.WorkerConfig{Queues: []string{"sms", "fast"}})
			h.clock.Advance(500 * time.Millisecond)
		}
		require.Len(t, starts, 8)
		require.LessOrEqual(t, ratelimit.BusiestWindow(starts, time.Second), 2, "both kinds share the queue's budget")
		require.Equal(t, 4, other)
		bs, err := h.store.ListBudgets(context.Background())
		require.NoError(t, err)
		require.Equal(t, "@queue/sms", bs[0].Name)
	})
}

func TestToZeroPausesAndAnOverrideResumes(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		ran := 0
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { ran++; return nil },
			jobs.RateLimit(ratelimit.Limit[sms]{To: 0, Per: time.Second, Key: "global"})))
		for i := 0; i < 5; i++ {
			h.enqueue(sms{})
		}
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		step := func(n int) {
			for i := 0; i < n; i++ {
				h.drain(jobs.WorkerConfig{})
				_, err := d.Tick(ctx)
				require.NoError(t, err)
				h.clock.Advance(time.Minute)
			}
		}
		step(30)
		require.Zero(t, ran, "paused for half an hour: nothing admitted")
		st, err := h.store.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(5), st[0].Counts[engine.StateScheduled]+st[0].Counts[engine.StateParked], "nothing lost")

		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "sms", To: 10, Per: time.Second, Burst: 1}, h.clock.Now()))
		// Within the horizon (5 minutes) the probe comes back and is
		// admitted; the dispatcher hands the rest slots at the new rate.
		step(5)
		require.Positive(t, ran)
		step(5)
		require.Equal(t, 5, ran, "resumed: the backlog drained")
	})
}

func TestA429HoldsTheWholeBudgetAndSpendsNoAttempt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		var runs []time.Time
		first := true
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[sms]) error {
			runs = append(runs, h.clock.Now())
			if first {
				first = false
				resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"30"}}}
				return jobs.RetryAfterResponse(resp, time.Minute)
			}
			return nil
		}, jobs.RateLimit(ratelimit.Limit[sms]{To: 100, Per: time.Second, Burst: 10, Key: "global"})))
		id := h.enqueue(sms{To: "a"})
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 1, res.Throttled)
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State)
		require.Equal(t, 0, j.Attempt, "no attempt spent")
		require.Equal(t, t0.Add(30*time.Second), j.RunAt)
		require.Contains(t, j.LastError, "upstream asked to retry after 30s")

		// Every job of the budget waits for those 30 s, not just this one.
		for i := 0; i < 3; i++ {
			h.enqueue(sms{To: "b"})
		}
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		for h.clock.Now().Before(t0.Add(29 * time.Second)) {
			h.clock.Advance(time.Second)
			h.drain(jobs.WorkerConfig{})
			_, err := d.Tick(ctx)
			require.NoError(t, err)
		}
		require.Len(t, runs, 1, "nothing admitted before 30 s")
		// At 30 s the budget admits again, at its steady rate (one every
		// 11 ms): the burst builds up again only as it goes unused.
		h.clock.Set(t0.Add(30 * time.Second))
		for i := 0; i < 10; i++ {
			_, err := d.Tick(ctx)
			require.NoError(t, err)
			h.drain(jobs.WorkerConfig{})
			h.clock.Advance(20 * time.Millisecond)
		}
		require.Len(t, runs, 5)
		for _, r := range runs[1:] {
			require.False(t, r.Before(t0.Add(30*time.Second)))
		}
		require.Equal(t, engine.StateCompleted, h.job(id).State)
		require.Equal(t, 1, h.job(id).Attempt)
	})
}

func TestRetryAfterIsCappedAndParsed(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d, ok := jobs.ParseRetryAfter("120", now)
	require.True(t, ok)
	require.Equal(t, 2*time.Minute, d)
	d, ok = jobs.ParseRetryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now)
	require.True(t, ok)
	require.Equal(t, 90*time.Second, d)
	_, ok = jobs.ParseRetryAfter("soon", now)
	require.False(t, ok)
	_, ok = jobs.ParseRetryAfter("-5", now)
	require.False(t, ok)
	// delay-seconds is digits only; more of them than an int64 holds is
	// the longest wait (which MaxRetryAfter caps), not the fallback's.
	_, ok = jobs.ParseRetryAfter("+5", now)
	require.False(t, ok, "a sign is no delay-seconds")
	d, ok = jobs.ParseRetryAfter("99999999999999999999", now)
	require.True(t, ok)
	require.Equal(t, time.Duration(math.MaxInt64), d)

	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error {
			return jobs.RetryAfter(24 * time.Hour)
		}))
		id := h.enqueue(sms{})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{MaxRetryAfter: 10 * time.Minute}).Throttled)
		require.Equal(t, t0.Add(10*time.Minute), h.job(id).RunAt, "capped at MaxRetryAfter")
	})
}

func TestAnOverrideTakesEffectWithinTheRefreshInterval(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		ran := make(chan time.Time, 20)
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { ran <- h.clock.Now(); return nil },
			jobs.RateLimit(ratelimit.Limit[sms]{To: 1, Per: time.Hour, Key: func(a sms) any { return a.To }})))
		h.enqueue(sms{To: "premium"})
		w := h.worker(jobs.WorkerConfig{PollInterval: time.Hour, OverrideRefresh: 5 * time.Second})
		stop := h.run(w)
		defer stop()
		receive(t, ran, 1)
		// A tenant gets a looser limit: it applies within 5 s, and its
		// debt under the old limit counts in the new limit's intervals.
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "sms/premium", To: 60, Per: time.Minute, Burst: 1}, h.clock.Now()))
		<-h.clock.WaitForTimerAt(t0.Add(5 * time.Second))
		h.clock.Advance(5 * time.Second) // the worker reads the override
		<-h.clock.WaitForTimerAt(t0.Add(10 * time.Second))
		h.enqueue(sms{To: "premium"}) // wakes the worker: denied, its slot within a second
		// The worker waits for that slot, not for its hour-long poll: the
		// 3,595 s left of one hour-long interval count as 3,595/3,600 of
		// one new interval (1 s), rounded up to the nanosecond.
		slot := t0.Add(5*time.Second + 998_611_112*time.Nanosecond)
		select {
		case <-h.clock.WaitForTimerAt(slot):
		case <-time.After(10 * time.Second):
			t.Fatalf("the worker set no timer for the slot at %s", slot.Sub(t0))
		}
		res, err := h.store.ListJobs(ctx, engine.JobFilter{State: engine.StateScheduled})
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.LessOrEqual(t, res[0].RunAt.Sub(h.clock.Now()), time.Second, "not an hour: the new limit, with its debt counted in its intervals")
	})
}

func TestShadowLimitsRunEverythingAndSayWouldDefer(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var events []jobs.DeferEvent
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[sms]{To: 2, Per: time.Hour, Burst: 2, Key: "global"})))
		for i := 0; i < 5; i++ {
			h.enqueue(sms{})
		}
		res := h.drain(jobs.WorkerConfig{ShadowLimits: true, Hooks: jobs.Hooks{OnDefer: func(e jobs.DeferEvent) { events = append(events, e) }}})
		require.Equal(t, 5, res.Completed)
		require.Zero(t, res.Deferred)
		require.Len(t, events, 1)
		require.True(t, events[0].Shadow)
		require.Equal(t, 3, events[0].Count, "the 3 an enforcing limit would have deferred")
	})
}

type charge struct{ Account string }

func (charge) Kind() string { return "charge" }

type refund struct{ Account string }

func (refund) Kind() string { return "refund" }

func TestCheckReportsEachFinding(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		nop := func(context.Context, *jobs.Job[charge]) error { return nil }
		require.NoError(t, jobs.Register(h.reg, nop,
			jobs.RateLimit(ratelimit.Limit[charge]{To: 100, Per: time.Minute, Burst: 10, Group: "Stripe", Key: "global"}),
			jobs.RateLimit(ratelimit.Limit[charge]{To: 5, Per: time.Second, Group: "stripé", Key: "global"})))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[refund]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[refund]{To: 50, Per: time.Minute, Group: "Stripe", Key: "global"})))
		require.NoError(t, h.reg.LimitQueue("sms", ratelimit.QueueLimit{To: 1, Per: time.Second}))
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "Stirpe/global", To: 1, Per: time.Second}, t0))
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "Stripe/Account/7", To: 1, Per: time.Second}, t0))

		findings, err := jobs.Check(ctx, h.reg, testdb.Public(h.store))
		require.NoError(t, err)
		var got []string
		for _, f := range findings {
			got = append(got, f.String())
		}
		text := strings.Join(got, "\n")
		require.Contains(t, text, `W001 warning: rate-limit scopes "Stripe" and "stripé" differ only by case or accents`)
		require.Contains(t, text, "W002 warning: group Stripe is declared with different limits (charge: 100/1m0s burst 10; refund: 50/1m0s burst 1)")
		require.Contains(t, text, "W003 warning: queue sms has a rate limit, but no running worker claims it")
		require.Contains(t, text, "W004 warning: the override of Stirpe/global names no declared limit")
		require.NotContains(t, text, "Stripe/Account/7", "an override of one budget of a declared scope is fine")
		require.Contains(t, text, "W007 warning: no live worker claims queue default, where kinds charge, refund go")
		require.Contains(t, text, "W008 warning: no dispatcher has heartbeated in the last 5m0s")
		require.Len(t, findings, 6)

		// A worker and a dispatcher whose heartbeats are older than
		// LiveAfter serve nothing; live ones do.
		old := engine.At(time.Now().Add(-jobs.LiveAfter - time.Minute))
		_, err = h.store.RegisterProcess(ctx, engine.Process{Kind: "worker", Queues: "default,sms"}, old)
		require.NoError(t, err)
		_, err = h.store.RegisterProcess(ctx, engine.Process{Kind: "dispatcher"}, old)
		require.NoError(t, err)
		findings, err = jobs.Check(ctx, h.reg, testdb.Public(h.store))
		require.NoError(t, err)
		require.Len(t, findings, 6)
		_, err = h.store.RegisterProcess(ctx, engine.Process{Kind: "worker", Queues: "default,sms"}, engine.DatabaseTime(time.Now))
		require.NoError(t, err)
		_, err = h.store.RegisterProcess(ctx, engine.Process{Kind: "dispatcher"}, engine.DatabaseTime(time.Now))
		require.NoError(t, err)
		findings, err = jobs.Check(ctx, h.reg, testdb.Public(h.store))
		require.NoError(t, err)
		require.Len(t, findings, 3, "%v", findings)
		for _, f := range findings {
			require.Contains(t, []string{"W001", "W002", "W004"}, f.Code)
		}

		// Limits too fine for a backlog to drain at their declared rate.
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[sms]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[sms]{To: 30, Per: time.Second, Key: "global"}),
			jobs.RateLimit(ratelimit.Limit[sms]{To: 300, Per: time.Second, Burst: 2, Group: "fast", Key: "global"}),
			jobs.RateLimit(ratelimit.Limit[sms]{To: 20, Per: time.Second, Key: "x", Group: "fine"})))
		findings, err = jobs.Check(ctx, h.reg, testdb.Public(h.store))
		require.NoError(t, err)
		got = nil
		for _, f := range findings {
			if f.Code == jobs.CodeImpreciseDrain {
				got = append(got, f.String())
			}
		}
		require.Len(t, got, 2, "%q", got)
		require.Contains(t, got[0], "W006 warning: the rate limit of sms on fast (300/1s burst 2): its emission interval is 3.344482ms")
		require.Contains(t, got[1], "W006 warning: the rate limit of sms on sms (30/1s burst 1): its emission interval is 33.333334ms with burst 1")
	})
}

// A burst that takes most of To leaves a backlog to drain at To − Burst +
// 1 per Per, far below To: "100 a minute, 100 at once" then admits one a
// minute. Check warns where that is less than half of To, for declared
// limits, queue limits and overrides alike.
func TestCheckWarnsOfABurstThatSlowsTheDrain(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[charge]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[charge]{To: 100, Per: time.Minute, Burst: 100, Group: "all", Key: "global"}),
			jobs.RateLimit(ratelimit.Limit[charge]{To: 10, Per: time.Minute, Burst: 6, Group: "half", Key: "global"}),
			jobs.RateLimit(ratelimit.Limit[charge]{To: 10, Per: time.Minute, Burst: 7, Group: "most", Key: "global"})))
		require.NoError(t, h.reg.LimitQueue("sms", ratelimit.QueueLimit{To: 4, Per: time.Minute, Burst: 4}))
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "half", To: 20, Per: time.Minute, Burst: 20}, t0))

		findings, err := jobs.Check(ctx, h.reg, testdb.Public(h.store))
		require.NoError(t, err)
		var got []string
		for _, f := range findings {
			if f.Code == jobs.CodeSlowDrain {
				got = append(got, f.String())
			}
		}
		require.Equal(t, []string{
			"W009 warning: the limit on queue sms (4/1m0s burst 4): its burst is 4 of 4, so once it is spent a backlog drains at 1 per 1m0s (To − Burst + 1); a smaller burst drains faster, and the bound is To in any window of Per either way",
			"W009 warning: the rate limit of charge on all (100/1m0s burst 100): its burst is 100 of 100, so once it is spent a backlog drains at 1 per 1m0s (To − Burst + 1); a smaller burst drains faster, and the bound is To in any window of Per either way",
			"W009 warning: the rate limit of charge on most (10/1m0s burst 7): its burst is 7 of 10, so once it is spent a backlog drains at 4 per 1m0s (To − Burst + 1); a smaller burst drains faster, and the bound is To in any window of Per either way",
			"W009 warning: the override of half (20/1m0s burst 20): its burst is 20 of 20, so once it is spent a backlog drains at 1 per 1m0s (To − Burst + 1); a smaller burst drains faster, and the bound is To in any window of Per either way",
		}, got, "10 a minute with a burst of 6 drains at 5, half of To: no warning")
	})
}

func TestCheckReportsPendingMigrations(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			s := b.OpenRaw(t)
			findings, err := jobs.Check(context.Background(), jobs.NewRegistry(), testdb.Public(s))
			require.NoError(t, err)
			require.Len(t, findings, 1)
			require.Equal(t, "E001", findings[0].Code)
			require.Equal(t, jobs.SeverityError, findings[0].Severity)
		})
	}
}
