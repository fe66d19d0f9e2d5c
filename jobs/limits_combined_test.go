package jobs_test

// A job under several limits at once (kind limits,
// groups shared by kinds, a queue limit, costs, shadow mode, a
// concurrency limit beside them, overrides). See docs/rate-limits.md,
// "Several limits on one kind", "Cost", "Limits on a whole queue",
// "Shadow mode" and docs/concurrency.md, "With rate limits".

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/concurrency"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type mlJob struct {
	Acct  string
	Items int
}

func (mlJob) Kind() string { return "ml" }

type mlOther struct{ Acct string }

func (mlOther) Kind() string { return "ml_other" }

func mlAcct(a mlJob) any { return a.Acct }

func mlItems(a mlJob) int { return max(a.Items, 1) }

// budgetTAT returns a budget's TAT, or the zero time when it has no row
// (a budget never charged).
func budgetTAT(t *testing.T, h *harness, key string) time.Time {
	t.Helper()
	row, found, err := h.store.GetBudgetInfo(context.Background(), key)
	require.NoError(t, err)
	if !found {
		return time.Time{}
	}
	return engine.FromNanos(row.TAT)
}

// requireCharged checks that a budget's TAT is exactly from + n×interval
// (n cost-1 admissions at from on a quiet budget); n == 0 means not
// charged at all (no row, or a TAT not past from).
func requireCharged(t *testing.T, h *harness, key string, from time.Time, n int, interval time.Duration, msg string) {
	t.Helper()
	got := budgetTAT(t, h, key)
	if n == 0 {
		require.False(t, got.After(from), "%s: budget %s was charged (TAT %s, %s past %s)", msg, key, got, got.Sub(from), from)
		return
	}
	require.Equal(t, from.Add(time.Duration(n)*interval), got, "%s: budget %s should hold exactly %d admission(s) of %s", msg, key, n, interval)
}

// (1) "A job is admitted only when every one of its budgets has room, and
// admitting it charges every one; a denial charges none." Two kind limits
// and a queue limit: the jobs the per-account budget denies must charge
// neither the group's budget nor the queue's.
func TestADenialByAKindLimitChargesNoOtherBudget(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.Queue("mlq"),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 1, Per: time.Minute, Key: mlAcct}),                                   // T = 60 s
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 10, Per: time.Minute, Burst: 10, Key: "global", Group: "mlglobal"}))) // T = 60 s
		require.NoError(t, h.reg.LimitQueue("mlq", ratelimit.QueueLimit{To: 10, Per: 10 * time.Second, Burst: 10})) // T = 10 s
		for _, a := range []string{"a", "a", "a", "b", "a", "c"} {
			h.enqueue(mlJob{Acct: a})
		}
		res := h.drain(jobs.WorkerConfig{Queues: []string{"mlq"}})
		require.Equal(t, 3, res.Completed, "a, b and c once each")
		require.Equal(t, 3, res.Deferred)
		requireCharged(t, h, "ml/a", t0, 1, time.Minute, "account a")
		requireCharged(t, h, "mlglobal/global", t0, 3, time.Minute, "the group's budget admitted 3 and must be charged for those 3 only")
		requireCharged(t, h, "@queue/mlq", t0, 3, 10*time.Second, "the queue's budget admitted 3 and must be charged for those 3 only")

		// Later: the waiting jobs of account a come back one a minute; each
		// admission charges each budget once, each denial none.
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{Queues: []string{"mlq"}}) }, 40, 5*time.Second)
		// By t0+200s: account a has run at t0, t0+60, t0+120, t0+180.
		st, err := h.store.Stats(context.Background())
		require.NoError(t, err)
		var done int64
		for _, q := range st {
			done += q.Counts[engine.StateCompleted]
		}
		require.Equal(t, int64(6), done)
		// The group budget: 6 admissions of 60 s, 3 at t0 then one at t0+60,
		// t0+120, t0+180 (each on a budget whose TAT was still ahead).
		require.Equal(t, t0.Add(6*time.Minute), budgetTAT(t, h, "mlglobal/global"), "6 admissions, no charge for the denials")
	})
}

// (1) The denying budget is the queue's limit: the kind's budget must not
// be charged for the jobs the queue denied.
func TestADenialByTheQueueLimitChargesNoKindBudget(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.Queue("mlq"),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 10, Per: time.Minute, Burst: 10, Key: "global", Cost: mlItems}))) // T = 60 s
		require.NoError(t, h.reg.LimitQueue("mlq", ratelimit.QueueLimit{To: 2, Per: time.Second, Burst: 2})) // T = 1 s
		for range 5 {
			h.enqueue(mlJob{Items: 2})
		}
		var events []jobs.DeferEvent
		res := h.drain(jobs.WorkerConfig{Queues: []string{"mlq"}, Hooks: jobs.Hooks{OnDefer: func(e jobs.DeferEvent) { events = append(events, e) }}})
		require.Equal(t, 2, res.Completed)
		require.Equal(t, 3, res.Deferred)
		requireCharged(t, h, "ml/global", t0, 4, time.Minute, "2 admissions of cost 2")
		requireCharged(t, h, "@queue/mlq", t0, 2, time.Second, "the queue's 2")
		require.Len(t, events, 1)
		require.Equal(t, []string{"@queue/mlq"}, events[0].Keys, "the queue's budget held them")
	})
}

// (1) The denying budget is a group shared with another kind: the kind's
// own budget is not charged for a job the group denied.
func TestADenialByASharedGroupChargesNoOwnBudget(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 5, Per: time.Minute, Burst: 5, Key: mlAcct}), // T = 60 s
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 1, Per: time.Minute, Key: "global", Group: "mlshared"})))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlOther]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[mlOther]{To: 1, Per: time.Minute, Key: "global", Group: "mlshared"})))
		other := h.enqueue(mlOther{})
		ml1, ml2 := h.enqueue(mlJob{Acct: "a"}), h.enqueue(mlJob{Acct: "a"})
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 1, res.Completed)
		require.Equal(t, engine.StateCompleted, h.job(other).State)
		requireCharged(t, h, "ml/a", t0, 0, time.Minute, "both ml jobs were denied by the shared group")
		require.Equal(t, "mlshared/global", h.job(ml1).WaitKey)
		require.Equal(t, "mlshared/global", h.job(ml2).WaitKey)
	})
}

// (3) "It waits until the latest of their next admission times, and the
// deferral names the budget that held it." — and it is admitted when it
// comes back, not deferred again.
func TestTheSlotIsTheLatestBudgetsAndNamesIt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var ran []time.Time
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { ran = append(ran, h.clock.Now()); return nil },
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 1, Per: 10 * time.Second, Key: mlAcct}),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 1, Per: time.Minute, Key: "global", Group: "mlslow"})))
		h.enqueue(mlJob{Acct: "a"})
		late := h.enqueue(mlJob{Acct: "a"})  // held by both: the group's is later
		other := h.enqueue(mlJob{Acct: "b"}) // held by the group only
		var events []jobs.DeferEvent
		res := h.drain(jobs.WorkerConfig{Hooks: jobs.Hooks{OnDefer: func(e jobs.DeferEvent) { events = append(events, e) }}})
		require.Equal(t, 1, res.Completed)
		j := h.job(late)
		require.Equal(t, "mlslow/global", j.WaitKey, "the group's next admission (t0+60s) is later than the account's (t0+10s)")
		require.Equal(t, t0.Add(time.Minute), j.RunAt)
		require.Equal(t, "mlslow/global", h.job(other).WaitKey)
		require.Equal(t, t0.Add(2*time.Minute), h.job(other).RunAt, "the next slot of the group's budget")
		require.Len(t, events, 1)
		require.Equal(t, map[string]int{"mlslow/global": 2}, events[0].PerKey)

		e, err := h.client.Explain(context.Background(), late)
		require.NoError(t, err)
		require.Equal(t, jobs.ReasonRateLimited, e.Reason)
		require.Contains(t, e.Summary, "deferred by rate limit mlslow/global")
		var binding []string
		for _, l := range e.Limits {
			if l.Binding {
				binding = append(binding, l.Key)
			}
		}
		require.Equal(t, []string{"mlslow/global"}, binding)

		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{}) }, 26, 5*time.Second)
		require.Equal(t, []time.Time{t0, t0.Add(time.Minute), t0.Add(2 * time.Minute)}, ran)
		require.Equal(t, 1, h.job(late).Deferrals, "admitted at its slot: no second deferral")
		require.Equal(t, 1, h.job(other).Deferrals)
	})
}

// (5) Cost with several budgets: a job's cost on one budget is charged
// there only, and a denial elsewhere charges none of it.
func TestACostIsChargedOnItsOwnBudgetOnly(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 5, Per: 50 * time.Second, Burst: 5, Key: "global", Group: "mlitems", Cost: mlItems}), // T = 50 s
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 2, Per: 20 * time.Second, Burst: 2, Key: mlAcct})))                                   // T = 20 s
		h.enqueue(mlJob{Acct: "a", Items: 3})
		h.enqueue(mlJob{Acct: "b", Items: 3}) // the items' budget has 2 left: denied
		h.enqueue(mlJob{Acct: "b", Items: 2}) // admitted
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 2, res.Completed)
		requireCharged(t, h, "mlitems/global", t0, 5, 50*time.Second, "cost 3 + cost 2")
		requireCharged(t, h, "ml/a", t0, 1, 20*time.Second, "one job of a")
		requireCharged(t, h, "ml/b", t0, 1, 20*time.Second, "one job of b admitted, one denied by the items' budget")

		_, err := h.client.Enqueue(context.Background(), mlJob{Acct: "c", Items: 6})
		require.ErrorContains(t, err, "cost 6 is above the burst (5)")
	})
}

// (6) A concurrency limit beside a rate limit: a job its rate limit
// defers gives its concurrency slot back while it waits, and a job
// blocked on its concurrency key is not charged by its rate limit.
func TestARateDeferredJobHoldsNoConcurrencySlot(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.ConcurrencyLimit(concurrency.Limit[mlJob]{Key: mlAcct}),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 2, Per: time.Minute, Burst: 2, Key: "global"}))) // T = 60 s
		a1, a2 := h.enqueue(mlJob{Acct: "a"}), h.enqueue(mlJob{Acct: "a"})
		b1, b2 := h.enqueue(mlJob{Acct: "b"}), h.enqueue(mlJob{Acct: "b"})
		require.Equal(t, engine.StateBlocked, h.job(a2).State)
		require.Equal(t, engine.StateBlocked, h.job(b2).State)
		// One claim of 2: a1 and b1 admitted; the blocked ones are not
		// candidates and charge nothing.
		w := h.worker(jobs.WorkerConfig{})
		res, err := w.Drain(ctx)
		require.NoError(t, err)
		require.Equal(t, engine.StateCompleted, h.job(a1).State)
		require.Equal(t, engine.StateCompleted, h.job(b1).State)
		// a2 and b2 got the slots back, were claimed and deferred by the
		// spent budget: they hold no slot while they wait.
		for _, id := range []int64{a2, b2} {
			j := h.job(id)
			require.Contains(t, []engine.State{engine.StateScheduled, engine.StateParked}, j.State)
			require.False(t, j.HoldsSlot, "job %d holds a concurrency slot while a rate limit defers it", id)
		}
		sems, err := h.store.ListSemaphores(ctx)
		require.NoError(t, err)
		for _, s := range sems {
			require.Zero(t, s.Held, "semaphore %s", s.Name)
		}
		require.Equal(t, 2, res.Completed)
		requireCharged(t, h, "ml/global", t0, 2, time.Minute, "two admissions; the blocked and the deferred charged nothing")

		// A third job of a, enqueued while a2 waits, takes the free slot.
		a3 := h.enqueue(mlJob{Acct: "a"})
		require.Equal(t, engine.StateReady, h.job(a3).State, "a2 gave its slot back")
	})
}

// (8) "The lines after it list every limit the job draws on": a job in a
// limited queue draws on the queue's limit too, whichever budget holds it.
func TestExplainOmitsTheQueueLimitAJobDrawsOn(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.Queue("mlq"),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 1, Per: time.Minute, Key: mlAcct})))
		require.NoError(t, h.reg.LimitQueue("mlq", ratelimit.QueueLimit{To: 100, Per: time.Minute, Burst: 10}))
		h.enqueue(mlJob{Acct: "a"})
		held := h.enqueue(mlJob{Acct: "a"}) // held by the kind's budget
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{Queues: []string{"mlq"}}).Completed)
		require.Equal(t, "ml/a", h.job(held).WaitKey)
		e, err := h.client.Explain(context.Background(), held)
		require.NoError(t, err)
		var keys []string
		for _, l := range e.Limits {
			keys = append(keys, l.Key)
		}
		require.ElementsMatch(t, []string{"ml/a", "@queue/mlq"}, keys,
			"explain lists every limit the job draws on; got lines:\n%s", strings.Join(e.Lines(), "\n"))
	})
}

// (8) Held by the queue's limit: explain names the queue's budget, with
// its declared limit, as the one it waits on.
func TestExplainNamesTheQueueLimitThatHoldsAJob(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.Queue("mlq"),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 100, Per: time.Minute, Burst: 10, Key: mlAcct})))
		require.NoError(t, h.reg.LimitQueue("mlq", ratelimit.QueueLimit{To: 1, Per: time.Minute}))
		h.enqueue(mlJob{Acct: "a"})
		held := h.enqueue(mlJob{Acct: "b"})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{Queues: []string{"mlq"}}).Completed)
		require.Equal(t, "@queue/mlq", h.job(held).WaitKey)
		e, err := h.client.Explain(context.Background(), held)
		require.NoError(t, err)
		require.Equal(t, jobs.ReasonRateLimited, e.Reason)
		require.Contains(t, e.Summary, "deferred by rate limit @queue/mlq (1 per 1m0s, burst 1")
		byKey := map[string]jobs.LimitExplanation{}
		for _, l := range e.Limits {
			byKey[l.Key] = l
		}
		require.True(t, byKey["@queue/mlq"].Binding)
		require.True(t, byKey["@queue/mlq"].Declared)
		require.False(t, byKey["ml/b"].Binding)
	})
}

// (4) Shadow beside an enforcing limit: every job the enforcing limit
// admits runs, the shadow budget is charged only for the admissions it
// would itself have made (as an enforcing one would on the same claims),
// the enforcing budget is charged exactly as without the shadow limit, and
// the would-defer records name the shadow budget.
func TestAShadowLimitBesideAnEnforcingOne(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 1, Per: time.Minute, Key: mlAcct}),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 2, Per: time.Minute, Burst: 2, Key: "global", Group: "mlshadow", Shadow: true}))) // T = 60 s
		for _, a := range []string{"a", "b", "c", "d", "a"} {
			h.enqueue(mlJob{Acct: a})
		}
		var events []jobs.DeferEvent
		res := h.drain(jobs.WorkerConfig{Hooks: jobs.Hooks{OnDefer: func(e jobs.DeferEvent) { events = append(events, e) }}})
		require.Equal(t, 4, res.Completed, "a, b, c, d: the enforcing limit admits them")
		require.Equal(t, 1, res.Deferred, "the second a, by its enforcing limit")
		requireCharged(t, h, "mlshadow/global", t0, 2, time.Minute, "the shadow budget admitted 2 and would have denied 2")
		for _, a := range []string{"a", "b", "c", "d"} {
			requireCharged(t, h, "ml/"+a, t0, 1, time.Minute, "enforcing")
		}
		var shadow, real int
		for _, e := range events {
			if e.Shadow {
				shadow += e.Count
				require.Equal(t, []string{"mlshadow/global"}, e.Keys)
			} else {
				real += e.Count
				require.Equal(t, []string{"ml/a"}, e.Keys)
			}
		}
		require.Equal(t, 2, shadow, "c and d would have been deferred")
		require.Equal(t, 1, real)
	})
}

// (5)+(4) "Shadow: compute and record every decision, but run the job
// anyway" / "Use it to size a limit against real traffic before it
// defers anything". A shadow limit's cost above its burst does not refuse
// the enqueue (it did): the job runs.
func TestAShadowLimitsCostAboveItsBurstDoesNotRefuseTheEnqueue(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 10, Per: time.Second, Burst: 2, Key: "global", Shadow: true, Cost: mlItems})))
		_, err := h.client.Enqueue(context.Background(), mlJob{Items: 3})
		require.NoError(t, err, "a shadow limit must not refuse what it does not enforce")
		res := h.drain(jobs.WorkerConfig{})
		require.Equal(t, 1, res.Completed, "shadow mode runs the job anyway")
	})
}

// (5)+(7) "A cost above Burst could never be admitted and is refused at
// enqueue, naming both numbers." An override that raises the burst makes
// such a cost admissible: the enqueue reads the overrides when a cost is
// above the declared burst, and takes the job (it checked only the
// declared burst).
func TestAnOverrideThatRaisesTheBurstAdmitsAHigherCostAtEnqueue(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 10, Per: time.Second, Burst: 2, Key: "global", Cost: mlItems})))
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "ml", To: 10, Per: time.Second, Burst: 5}, h.clock.Now()))
		_, err := h.client.Enqueue(ctx, mlJob{Items: 4})
		require.NoError(t, err, "the limit in force (burst 5) admits a cost of 4")
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
	})
}

// (5)+(7) The other way: after an override lowered the burst to 2, a job
// of cost 4 is taken at enqueue (the client reads overrides only for a
// cost above the declared burst, 5: docs/rate-limits.md, "Cost") and fails
// at its first claim, naming the limit and both numbers; an override that
// keeps the declared burst changes nothing at enqueue, and one that does
// not admit a cost above the declared burst is named in the refusal.
func TestACostAboveAnOverriddenBurstFailsAtItsFirstClaim(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 10, Per: time.Second, Burst: 5, Key: "global", Cost: mlItems})))
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "ml", To: 10, Per: time.Second, Burst: 2}, h.clock.Now()))
		res, err := h.client.Enqueue(ctx, mlJob{Items: 4})
		require.NoError(t, err)
		require.Zero(t, h.drain(jobs.WorkerConfig{}).Completed)
		j := h.job(res.ID)
		require.Equal(t, engine.StateFailed, j.State)
		require.Contains(t, j.LastError, "4")
		require.Contains(t, j.LastError, "2")

		_, err = h.client.Enqueue(ctx, mlJob{Items: 6})
		require.ErrorContains(t, err, "cost 6 is above the burst in force on ml/global (2, set by an override)", "above the declared burst and the override's")
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "ml", To: 10, Per: time.Second, Burst: 3}, h.clock.Now()))
		_, err = h.client.Enqueue(ctx, mlJob{Items: 6})
		require.ErrorContains(t, err, "cost 6 is above the burst in force on ml/global (3, set by an override)")
	})
}

// (7) An override lowers the burst of one of a job's limits below the
// job's cost while the job waits on another budget: it fails at its next
// claim, naming the limit and both numbers, and the budgets are not
// charged for it.
func TestAnOverrideBelowTheCostOfAJobWaitingElsewhereFailsIt(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 10, Per: 10 * time.Second, Burst: 5, Key: "global", Group: "mlitems", Cost: mlItems}),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 1, Per: time.Minute, Key: mlAcct})))
		h.enqueue(mlJob{Acct: "a", Items: 1})
		waiting := h.enqueue(mlJob{Acct: "a", Items: 4})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.Equal(t, "ml/a", h.job(waiting).WaitKey)
		itemsBefore := budgetTAT(t, h, "mlitems/global")

		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "mlitems", To: 10, Per: 10 * time.Second, Burst: 2}, h.clock.Now()))
		h.clock.Set(t0.Add(time.Minute))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		_, err := d.Tick(ctx)
		require.NoError(t, err)
		h.drain(jobs.WorkerConfig{})
		j := h.job(waiting)
		require.Equal(t, engine.StateFailed, j.State)
		require.Contains(t, j.LastError, "rate limit mlitems/global")
		require.Contains(t, j.LastError, "costs 4, more than the burst of 2")
		require.Equal(t, itemsBefore, budgetTAT(t, h, "mlitems/global"), "not charged")
		requireCharged(t, h, "ml/a", t0, 1, time.Minute, "not charged for the failed job")
	})
}

// (7) An override pauses one of a job's two limits while its jobs wait on
// the other: they come back, are held by the paused one, and nothing they
// do charges the other budget; cleared, the backlog drains under both
// bounds.
func TestPausingOneOfTwoLimitsWhileJobsWait(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		record, starts := startRecorder()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { record(h.clock.Now()); return nil },
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 1, Per: 10 * time.Second, Key: mlAcct}),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 3, Per: 10 * time.Second, Burst: 3, Key: "global", Group: "mlall"})))
		for range 6 {
			h.enqueue(mlJob{Acct: "a"})
		}
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)
		require.NoError(t, h.store.SetOverride(ctx, engine.Override{Target: "mlall", To: 0, Per: 10 * time.Second, Burst: 3}, h.clock.Now()))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{}) }, 60, 5*time.Second) // 5 minutes paused
		require.Len(t, starts(), 1, "paused: nothing more admitted")
		acct := budgetTAT(t, h, "ml/a")
		require.False(t, acct.After(t0.Add(10*time.Second)), "the account's budget was charged while the other limit paused: TAT %s", acct)

		require.NoError(t, h.store.ClearOverride(ctx, "mlall"))
		resumed := h.clock.Now()
		steps(t, h, d, func() { h.drain(jobs.WorkerConfig{}) }, 90, 5*time.Second) // the probe returns within the horizon
		all := starts()
		require.Len(t, all, 6, "every job ran")
		require.LessOrEqual(t, ratelimit.BusiestWindow(since(all, resumed), 10*time.Second), 1, "the account's bound")
	})
}

// (2) Two workers on two connection pools claim at once, on the fake
// clock, two kinds that share a group, each with a budget of its own, in a
// queue with a limit: every budget, separately, holds no more than To in
// any window of Per.
func TestTwoClaimersKeepEveryBudgetsBound(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		var mu sync.Mutex
		starts := map[string][]time.Time{}
		rec := func(keys ...string) {
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				starts[k] = append(starts[k], c.Now())
			}
		}
		reg := jobs.NewRegistry()
		require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[mlJob]) error {
			rec("ml/"+j.Args.Acct, "mlshared/global", "@queue/mlq")
			return nil
		}, jobs.Queue("mlq"),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 2, Per: time.Second, Burst: 2, Key: mlAcct}),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 4, Per: time.Second, Burst: 2, Key: "global", Group: "mlshared"})))
		require.NoError(t, jobs.Register(reg, func(_ context.Context, j *jobs.Job[mlOther]) error {
			rec("ml_other/"+j.Args.Acct, "mlshared/global", "@queue/mlq")
			return nil
		}, jobs.Queue("mlq"),
			jobs.RateLimit(ratelimit.Limit[mlOther]{To: 1, Per: time.Second, Key: func(a mlOther) any { return a.Acct }}),
			jobs.RateLimit(ratelimit.Limit[mlOther]{To: 4, Per: time.Second, Burst: 2, Key: "global", Group: "mlshared"})))
		require.NoError(t, reg.LimitQueue("mlq", ratelimit.QueueLimit{To: 6, Per: time.Second, Burst: 2}))
		client := jobs.NewClient(testdb.Public(s), reg, jobs.ClientConfig{Clock: c})
		var items []jobs.Item
		for i := range 12 {
			items = append(items, jobs.Item{Args: mlJob{Acct: fmt.Sprint(i % 3)}}, jobs.Item{Args: mlOther{Acct: fmt.Sprint(i % 2)}})
		}
		_, err := client.EnqueueMany(ctx, items)
		require.NoError(t, err)
		workers := []*jobs.Worker{}
		for range 2 {
			w, err := jobs.NewWorker(testdb.Public(open()), reg, jobs.WorkerConfig{Clock: c, Logger: quiet(), Queues: []string{"mlq"}, Concurrency: 4})
			require.NoError(t, err)
			workers = append(workers, w)
		}
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet()})
		total := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(starts["@queue/mlq"])
		}
		for step := 0; step < 200 && total() < len(items); step++ {
			_, err := d.Tick(ctx)
			require.NoError(t, err)
			var wg sync.WaitGroup
			for _, w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := w.Drain(ctx)
					assertNoErr(t, err)
				}()
			}
			wg.Wait()
			c.Advance(100 * time.Millisecond)
		}
		if total() != len(items) {
			for _, st := range []engine.State{engine.StateReady, engine.StateScheduled, engine.StateParked, engine.StateBlocked, engine.StateFailed} {
				js, err := s.ListJobs(ctx, engine.JobFilter{State: st})
				require.NoError(t, err)
				for _, j := range js {
					t.Logf("left: job %d %s %s run_at %s wait %s keys %v deferrals %d err %q", j.ID, j.Kind, j.State, j.RunAt.Sub(t0), j.WaitKey, j.RateKeys, j.Deferrals, j.LastError)
				}
			}
			bs, _ := s.ListBudgets(ctx)
			for _, b := range bs {
				t.Logf("budget %s tat %s next %s parked %d waiting %d", b.Name, engine.FromNanos(b.TAT).Sub(t0), engine.FromNanos(b.NextSlot).Sub(t0), b.Parked, b.Waiting)
			}
			t.Logf("now %s", c.Now().Sub(t0))
		}
		require.Equal(t, len(items), total(), "every job ran")
		to := map[string]int{"mlshared/global": 4, "@queue/mlq": 6, "ml/0": 2, "ml/1": 2, "ml/2": 2, "ml_other/0": 1, "ml_other/1": 1}
		mu.Lock()
		defer mu.Unlock()
		for k, n := range to {
			require.LessOrEqual(t, ratelimit.BusiestWindow(starts[k], time.Second), n, "budget %s", k)
		}
	})
}

// (6) docs/concurrency.md: "A job that was ready before and comes back
// without a slot (from an upstream 429, a deferral on a queue's rate
// limit, ...) is blocked, never discarded: it was admitted once." A
// Discard kind in a queue with a limit.
func TestAQueueDeferredDiscardJobIsBlockedNotDiscarded(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.Queue("mlq"),
			jobs.ConcurrencyLimit(concurrency.Limit[mlJob]{Key: mlAcct, OnConflict: concurrency.Discard})))
		require.NoError(t, h.reg.LimitQueue("mlq", ratelimit.QueueLimit{To: 1, Per: time.Minute}))
		h.enqueue(mlJob{Acct: "b"})
		x1 := h.enqueue(mlJob{Acct: "a"})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{Queues: []string{"mlq"}}).Completed)
		j := h.job(x1)
		require.Equal(t, "@queue/mlq", j.WaitKey)
		require.False(t, j.HoldsSlot, "gave its slot back while the queue's limit holds it")
		x2 := h.enqueue(mlJob{Acct: "a"})
		require.Equal(t, engine.StateReady, h.job(x2).State, "took the free slot")

		h.clock.Set(t0.Add(time.Minute))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		_, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, h.job(x1).State, "came back to a taken slot: blocked, never discarded")
	})
}

// "every budget the job ran under — each of its kind's limits, and its
// queue's — is held back" by an upstream 429, and the job spends no
// attempt.
func TestA429HoldsEveryBudgetOfAJobUnderSeveralLimits(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		first := true
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error {
			if first {
				first = false
				return jobs.RetryAfter(30 * time.Second)
			}
			return nil
		}, jobs.Queue("mlq"),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 100, Per: time.Second, Burst: 10, Key: mlAcct}),
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 100, Per: time.Second, Burst: 10, Key: "global", Group: "mlall"})))
		require.NoError(t, h.reg.LimitQueue("mlq", ratelimit.QueueLimit{To: 100, Per: time.Second, Burst: 10}))
		id := h.enqueue(mlJob{Acct: "a"})
		require.Equal(t, 1, h.drain(jobs.WorkerConfig{Queues: []string{"mlq"}}).Throttled)
		j := h.job(id)
		require.Equal(t, 0, j.Attempt)
		require.Equal(t, t0.Add(30*time.Second), j.RunAt)
		for _, k := range []string{"ml/a", "mlall/global", "@queue/mlq"} {
			b := budget(t, h, k)
			require.False(t, engine.FromNanos(b.NextSlot).Before(t0.Add(30*time.Second)), "budget %s's slots start at 30 s", k)
			p := b.Params()
			ok, _ := p.Check(ratelimit.State{TAT: b.TAT, NextSlot: b.NextSlot}, engine.Nanos(t0.Add(29*time.Second)), 1)
			require.False(t, ok, "budget %s admits nothing before 30 s", k)
		}
	})
}
