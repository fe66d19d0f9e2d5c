package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// drainer drives one budget the way workers and a dispatcher do, on the
// fake clock: every step it promotes due jobs (the dispatcher's way, or
// the claim's own PromoteDue), unparks, and claims; it records every
// admission and its time.
type drainer struct {
	t            testing.TB
	s            *engine.Store
	pid          int64
	lim          engine.Limits
	horizon      time.Duration
	claimPromote bool
	now          time.Time
	order        []int64
	times        []time.Time
	moves        int // rows moved: deferrals, displacements, unparks, admissions
	by           [6]int
}

func (d *drainer) claim() *engine.ClaimResult {
	d.t.Helper()
	res, err := d.s.Claim(context.Background(), engine.ClaimParams{
		ProcessID: d.pid, Queues: []string{"default"}, Max: 1000, Clock: engine.At(d.now), Limits: d.lim,
		Horizon: d.horizon, PromoteDue: d.claimPromote,
	})
	require.NoError(d.t, err)
	for _, j := range res.Jobs {
		d.order = append(d.order, j.ID)
		d.times = append(d.times, d.now)
	}
	d.moves += len(res.Jobs) + len(res.Deferred) + len(res.Displaced) + len(res.Unparked) + res.Promoted
	d.by[0] += len(res.Jobs)
	d.by[1] += len(res.Deferred)
	d.by[2] += len(res.Displaced)
	d.by[3] += len(res.Unparked)
	return res
}

// step moves the clock on by dt and does one round.
func (d *drainer) step(dt time.Duration) *engine.ClaimResult {
	d.t.Helper()
	ctx := context.Background()
	d.now = d.now.Add(dt)
	if !d.claimPromote {
		n, _, err := d.s.Promote(ctx, engine.At(d.now), 1000)
		require.NoError(d.t, err)
		d.moves += n
		d.by[4] += n
	}
	n, err := d.s.Unpark(ctx, engine.At(d.now), d.horizon, 100, 0)
	require.NoError(d.t, err)
	d.moves += n
	d.by[5] += n
	return d.claim()
}

// drain runs steps until want jobs were admitted in all, or fails.
func (d *drainer) drain(dt time.Duration, want int) {
	d.t.Helper()
	for i := 0; len(d.order) < want; i++ {
		if i >= 100*want+100 {
			jobs, err := d.s.ListJobs(context.Background(), engine.JobFilter{Limit: 1000})
			require.NoError(d.t, err)
			for _, j := range jobs {
				if j.State != engine.StateRunning {
					d.t.Logf("job %d: %s run_at=%s wait=%s", j.ID, j.State, j.RunAt.Sub(t0), j.WaitKey)
				}
			}
			bs, _ := d.s.ListBudgets(context.Background())
			d.t.Logf("budgets: %+v", bs)
			d.t.Fatalf("the budget stopped admitting: %d of %d", len(d.order), want)
		}
		d.step(dt)
	}
}

func prioritized(prio int) engine.NewJob {
	j := limited("k", "k/x")
	j.Priority = prio
	return j
}

func TestAnUrgentJobIsAmongTheNextTwoAdmissionsOfItsBudget(t *testing.T) {
	// 10 a second, no burst; slots reach 2s ahead: past 20 waiting jobs
	// the backlog is parked. Two backlogs slotted, one parked (40 jobs
	// past the horizon): a deeper one (150) drained a slot at a time for
	// 15 s of the fake clock and caught nothing this one misses (an
	// urgent job that takes no slot, a displaced job parked uncounted,
	// an unpark that forgets its parked jobs).
	for _, n := range []int{3, 15, 60} {
		for _, claimPromote := range []bool{false, true} {
			t.Run(fmt.Sprintf("backlog=%d/claim-promotes=%v", n, claimPromote), func(t *testing.T) {
				testdb.Each(t, func(t *testing.T, s *engine.Store) {
					lim := limits{"k": spec(t, "k", 10, time.Second, 1)}
					routine := make([]engine.NewJob, n)
					for i := range routine {
						routine[i] = prioritized(1)
					}
					backlog := enqueue(t, s, t0, routine...)
					d := &drainer{t: t, s: s, pid: register(t, s, t0), lim: lim, horizon: 2 * time.Second, claimPromote: claimPromote, now: t0}
					d.claim()
					d.step(100 * time.Millisecond) // the backlog drains a little
					before := len(d.order)

					urgent := enqueue(t, s, d.now, prioritized(0))[0]
					res := d.step(20 * time.Millisecond)
					if n > before {
						// It was deferred, into the slot of the first
						// routine job waiting, which waits again.
						require.Len(t, res.Deferred, 1)
						require.Equal(t, urgent, res.Deferred[0].JobID)
						require.False(t, res.Deferred[0].Parked)
						require.Len(t, res.Displaced, 1, "one routine job gives up its slot")
						require.Equal(t, "k/x", res.Displaced[0].Key)
					}
					// The next two admissions in fine steps; the rest of the
					// backlog, which only has to come out once and within the
					// bound, a slot at a time.
					d.drain(10*time.Millisecond, min(before+2, n+1))
					d.drain(100*time.Millisecond, n+1)

					after := d.order[before:]
					require.Contains(t, after[:min(2, len(after))], urgent, "the urgent job is among the next two admissions")
					require.ElementsMatch(t, append(slices.Clone(backlog), urgent), d.order, "every job admitted once: nothing lost")
					require.LessOrEqual(t, ratelimit.BusiestWindow(d.times, time.Second), 10, "the limit's bound holds")
				})
			})
		}
	}
}

func TestAdmissionsGoByPriorityInsideABudget(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"k": spec(t, "k", 10, time.Second, 1)}
		var low []int64
		for range 10 {
			low = append(low, enqueue(t, s, t0, prioritized(2))...)
		}
		d := &drainer{t: t, s: s, pid: register(t, s, t0), lim: lim, horizon: time.Minute, now: t0}
		d.claim() // low[0] runs; low[1:] wait at 100ms, 200ms, … 900ms
		a := enqueue(t, s, at(10*time.Millisecond), prioritized(1))[0]
		res := d.step(10 * time.Millisecond)
		require.Equal(t, at(100*time.Millisecond), res.Deferred[0].Until, "a takes the first slot")
		require.Equal(t, []engine.Deferral{{JobID: low[1], Kind: "k", Key: "k/x", Until: at(time.Second)}}, res.Displaced,
			"and its job takes the next free slot")
		b := enqueue(t, s, at(20*time.Millisecond), prioritized(1))[0]
		res = d.step(10 * time.Millisecond)
		require.Equal(t, at(200*time.Millisecond), res.Deferred[0].Until)
		c := enqueue(t, s, at(30*time.Millisecond), prioritized(0))[0]
		res = d.step(10 * time.Millisecond)
		require.Equal(t, at(100*time.Millisecond), res.Deferred[0].Until, "c takes a's slot")
		// a takes the slot of the first job after it less urgent than it
		// (b's is as urgent), whose job goes to the back.
		require.Equal(t, []engine.Deferral{
			{JobID: a, Kind: "k", Key: "k/x", Until: at(300 * time.Millisecond)},
			{JobID: low[3], Kind: "k", Key: "k/x", Until: at(1200 * time.Millisecond)},
		}, res.Displaced)

		d.drain(10*time.Millisecond, 13)
		want := append([]int64{low[0], c, b, a}, low[4:]...)
		want = append(want, low[1], low[2], low[3])
		require.Equal(t, want, d.order, "by priority; inside one, in the order of the slots")
		require.LessOrEqual(t, ratelimit.BusiestWindow(d.times, time.Second), 10)
	})
}

func TestUrgentJobsTakeSlotsFromAParkedBacklog(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		// 1 a second with a horizon of 5s: of 30 jobs, 5 get slots and the
		// rest park. Then five urgent jobs come, one by one.
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		routine := make([]engine.NewJob, 30)
		for i := range routine {
			routine[i] = prioritized(1)
		}
		backlog := enqueue(t, s, t0, routine...)
		d := &drainer{t: t, s: s, pid: register(t, s, t0), lim: lim, horizon: 5 * time.Second, now: t0}
		d.claim()
		var urgent []int64
		for range 5 {
			urgent = append(urgent, enqueue(t, s, d.now, prioritized(0))...)
			res := d.step(10 * time.Millisecond)
			require.Len(t, res.Displaced, 1)
			require.True(t, res.Displaced[0].Parked, "the displaced job parks: the slots reach the horizon")
		}
		d.drain(100*time.Millisecond, 35)
		require.Equal(t, urgent, d.order[1:6], "the urgent jobs run next, in their order")
		// The displaced ones park and come back first among the parked,
		// being the oldest of them: the routine jobs run in their order.
		require.Equal(t, backlog, append(d.order[:1:1], d.order[6:]...))
		require.LessOrEqual(t, ratelimit.BusiestWindow(d.times, time.Second), 1)
	})
}

func TestDeferringJobsOfOnePriorityLooksForNoSlotToTake(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lookups := func(stmts []string) int {
			n := 0
			for _, q := range stmts {
				if strings.Contains(q, "j.priority > ") {
					n++
				}
			}
			return n
		}
		rs, rec := testdb.Record(s)
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		pid := register(t, s, t0)
		enqueue(t, s, t0, prioritized(1), prioritized(1), prioritized(1))
		claimLimited(t, rs, pid, t0, 10, lim, 0)
		enqueue(t, s, t0, prioritized(1), prioritized(1))
		claimLimited(t, rs, pid, at(time.Millisecond), 10, lim, 0)
		// Less urgent jobs go behind without looking either.
		enqueue(t, s, t0, prioritized(3))
		res := claimLimited(t, rs, pid, at(2*time.Millisecond), 10, lim, 0)
		require.Equal(t, at(5*time.Second), res.Deferred[0].Until)
		require.Zero(t, lookups(rec.Take()), "no slot is looked for")

		// A more urgent one looks, and takes the first slot; the job it
		// displaced (priority 1) looks once more, and takes the slot of
		// the priority-3 job: one look-up per priority level.
		enqueue(t, s, t0, prioritized(0))
		res = claimLimited(t, rs, pid, at(3*time.Millisecond), 10, lim, 0)
		require.Equal(t, at(time.Second), res.Deferred[0].Until)
		require.Len(t, res.Displaced, 2)
		require.Equal(t, at(5*time.Second), res.Displaced[0].Until)
		require.Equal(t, at(6*time.Second), res.Displaced[1].Until)
		require.Equal(t, 2, lookups(rec.Take()))
	})
}

func TestDeferOverflowLeavesUrgentJobsToTheClaims(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		pid := register(t, s, t0)
		enqueue(t, s, t0, prioritized(1), prioritized(1), prioritized(1))
		res := claimLimited(t, s, pid, t0, 10, lim, time.Minute)
		require.Len(t, res.Deferred, 2)
		urgent := enqueue(t, s, t0, prioritized(0), prioritized(1))
		o := engine.Overflow{Queue: "default", Kind: "k", RateKeys: engine.EncodeRateKeys([]engine.RateKey{{Key: "k/x", Cost: 1}}), Key: "k/x"}
		swept, slots, err := s.DeferOverflow(ctx, engine.At(t0), o, time.Minute, 100)
		require.NoError(t, err)
		require.Empty(t, swept, "the sweep ends: the claims beside it would leave the urgent job to it")
		require.Empty(t, slots)
		require.Equal(t, engine.StateReady, state(t, s, urgent[0]).State)
		res = claimLimited(t, s, pid, at(time.Millisecond), 1, lim, time.Minute)
		require.Equal(t, urgent[0], res.Deferred[0].JobID)
		require.Equal(t, at(time.Second), res.Deferred[0].Until, "the claim gives it the first slot")
		// With no job more urgent than those slotted ahead, a sweep moves
		// the routine one.
		swept, slots, err = s.DeferOverflow(ctx, engine.At(at(time.Millisecond)), o, time.Minute, 100)
		require.NoError(t, err)
		require.Equal(t, []int64{urgent[1]}, swept)
		require.Equal(t, []time.Time{at(4 * time.Second)}, slots)
	})
}

func TestAnUrgentJobAdmittedAheadOfADueOneDisplacesIt(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"k": spec(t, "k", 10, time.Second, 1)}
		routine := enqueue(t, s, t0, prioritized(1), prioritized(1), prioritized(1), prioritized(1), prioritized(1))
		d := &drainer{t: t, s: s, pid: register(t, s, t0), lim: lim, horizon: time.Minute, now: t0}
		d.claim() // routine[0] runs; the others wait at 100ms … 400ms
		// At 100ms an urgent job is ready as routine[1] comes for its slot:
		// the urgent one is admitted, and routine[1] goes to the back
		// instead of riding at the head of the line, which would push
		// every slot behind it back in turn.
		urgent := enqueue(t, s, at(100*time.Millisecond), prioritized(0))[0]
		res := d.step(100 * time.Millisecond)
		require.Equal(t, []int64{urgent}, ids(res.Jobs))
		require.Equal(t, []engine.Deferral{{JobID: routine[1], Kind: "k", Key: "k/x", Until: at(500 * time.Millisecond)}}, res.Deferred)
		deferred := 0
		for range 4 {
			deferred += len(d.step(100 * time.Millisecond).Deferred)
		}
		require.Zero(t, deferred, "every other job is admitted at its slot")
		require.Equal(t, []int64{routine[0], urgent, routine[2], routine[3], routine[4], routine[1]}, d.order)
	})
}

func TestWithSeveralBudgetsTheOneThatHoldsLongestDecides(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"k": spec(t, "k", 10, time.Second, 1), "b": spec(t, "b", 2, time.Second, 1)}
		pid := register(t, s, t0)
		// Budget b is spent until 350ms.
		early := limited("b", "b/x")
		enqueue(t, s, at(-150*time.Millisecond), early)
		require.Len(t, claimLimited(t, s, pid, at(-150*time.Millisecond), 10, lim, time.Minute).Jobs, 1)
		routine := enqueue(t, s, t0, prioritized(1), prioritized(1), prioritized(1), prioritized(1), prioritized(1), prioritized(1))
		d := &drainer{t: t, s: s, pid: pid, lim: lim, horizon: time.Minute, now: t0}
		d.claim() // routine[0] runs; the others wait on k at 100ms … 500ms

		both := prioritized(0)
		both.RateKeys = append(both.RateKeys, engine.RateKey{Key: "b/x", Cost: 1})
		urgent := enqueue(t, s, at(10*time.Millisecond), both)[0]
		res := d.step(10 * time.Millisecond)
		// b holds it longest (until 350ms): it waits there, and takes no
		// slot of k, whose slots before 350ms it could not use.
		require.Equal(t, []engine.Deferral{{JobID: urgent, Kind: "k", Key: "b/x", Until: at(350 * time.Millisecond)}}, res.Deferred)
		require.Empty(t, res.Displaced)
		// At 350ms b admits it and k holds it: it takes k's next slot (at
		// 400ms, of routine[4], which goes to the back) and runs there.
		d.drain(10*time.Millisecond, 7)
		require.Equal(t, []int64{routine[0], routine[1], routine[2], routine[3], urgent, routine[5], routine[4]}, d.order)
		require.Equal(t, at(400*time.Millisecond), d.times[4])
		require.LessOrEqual(t, ratelimit.BusiestWindow(d.times, time.Second), 10)
	})
}
