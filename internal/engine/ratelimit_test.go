package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

func limited(kind, key string) engine.NewJob {
	j := job(kind, "default", 0)
	j.RateKeys = []engine.RateKey{{Key: key, Cost: 1}}
	return j
}

func claimLimited(t *testing.T, s *engine.Store, pid int64, now time.Time, max int, l engine.Limits, horizon time.Duration, queues ...string) *engine.ClaimResult {
	t.Helper()
	if len(queues) == 0 {
		queues = []string{"default"}
	}
	res, err := s.Claim(context.Background(), engine.ClaimParams{
		ProcessID: pid, Queues: queues, Max: max, Clock: engine.At(now), Limits: l, Horizon: horizon,
	})
	require.NoError(t, err)
	return res
}

func TestClaimWithoutLimitsRunsOnlyThePlainStatements(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		rs, rec := testdb.Record(s)
		pid := register(t, s, t0)
		enqueue(t, s, t0, job("a", "default", 0), job("a", "default", 0))
		require.Len(t, claimLimited(t, rs, pid, t0, 1, nil, 0).Jobs, 1)
		plain := rec.Take()
		require.Len(t, plain, 2, "lock the candidates, mark them running: %q", plain)

		// Limits declared, but not on these jobs: the plain claim and one
		// look for limited jobs (their own index), which finds none.
		lim := limits{"b": spec(t, "b", 1, time.Second, 1)}
		require.Len(t, claimLimited(t, rs, pid, t0, 1, lim, 0).Jobs, 1)
		withLimits := rec.Take()
		require.Len(t, withLimits, 3, "%q", withLimits)
		require.Equal(t, plain[0], withLimits[0])
		require.Equal(t, plain[1], withLimits[2])

		// A job that carries a key costs the budget statements.
		enqueue(t, s, t0, limited("b", "b/x"))
		require.Len(t, claimLimited(t, rs, pid, t0, 1, lim, 0).Jobs, 1)
		require.Greater(t, len(rec.Take()), len(plain))
	})
}

func TestDeferredJobsGetSlotsOneIntervalApart(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"sync": spec(t, "sync", 1, time.Second, 1)}
		jobs := make([]engine.NewJob, 10)
		for i := range jobs {
			jobs[i] = limited("sync", "sync/global")
		}
		jobIDs := enqueue(t, s, t0, jobs...)
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 10, lim, 0)
		require.Equal(t, []int64{jobIDs[0]}, ids(res.Jobs))
		require.Equal(t, t0, res.DecidedAt)
		require.Len(t, res.Deferred, 9)
		for i, d := range res.Deferred {
			require.Equal(t, jobIDs[i+1], d.JobID)
			require.Equal(t, "sync/global", d.Key)
			require.Equal(t, at(time.Duration(i+1)*time.Second), d.Until, "slot %d", i)
			j := state(t, s, d.JobID)
			require.Equal(t, engine.StateScheduled, j.State)
			require.Equal(t, "sync/global", j.WaitKey)
			require.Equal(t, d.Until, j.RunAt)
			require.Equal(t, 0, j.Attempt, "a deferral spends no attempt")
		}
		bs, err := s.ListBudgets(ctx)
		require.NoError(t, err)
		require.Len(t, bs, 1)
		require.Equal(t, 9, bs[0].Waiting)
		require.Equal(t, at(time.Second), bs[0].NextAdmission(t0))

		// Each slot is admitted when it comes, one a second.
		for i := 1; i <= 9; i++ {
			now := at(time.Duration(i) * time.Second)
			n, _, err := s.Promote(ctx, engine.At(now), 100)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			res := claimLimited(t, s, pid, now, 10, lim, 0)
			require.Equal(t, []int64{jobIDs[i]}, ids(res.Jobs), "slot %d", i)
			require.Empty(t, res.Deferred)
		}
	})
}

func TestAJobThatFindsTheBudgetSpentWaitsAgain(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		first := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 5, lim, 0)
		require.Len(t, res.Jobs, 1)
		require.Equal(t, at(time.Second), res.Deferred[0].Until)
		// Another job takes the budget a moment before the slot comes.
		late := enqueue(t, s, at(time.Second), limited("k", "k/x"))
		require.Equal(t, []int64{late[0]}, ids(claimLimited(t, s, pid, at(time.Second), 5, lim, 0).Jobs))
		_, _, err := s.Promote(ctx, engine.At(at(time.Second)), 100)
		require.NoError(t, err)
		res = claimLimited(t, s, pid, at(time.Second), 5, lim, 0)
		require.Empty(t, res.Jobs)
		require.Equal(t, []int64{first[1]}, []int64{res.Deferred[0].JobID})
		require.Equal(t, at(2*time.Second), res.Deferred[0].Until, "the next free slot")
	})
}

func TestUnlimitedJobsInTheSameClaimAreClaimedAsUsual(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"k": spec(t, "k", 1, time.Hour, 1)}
		jobIDs := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"), job("free", "default", 0), limited("k", "k/x"), job("free", "default", 0))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 10, lim, 0)
		require.ElementsMatch(t, []int64{jobIDs[0], jobIDs[2], jobIDs[4]}, ids(res.Jobs))
		require.Len(t, res.Deferred, 2)
	})
}

func TestParkedJobsGetSlotsAsTheHorizonAdvances(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Minute, 1)}
		const horizon = 5 * time.Minute
		jobs := make([]engine.NewJob, 20)
		for i := range jobs {
			jobs[i] = limited("k", "k/x")
		}
		jobIDs := enqueue(t, s, t0, jobs...)
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 20, lim, horizon)
		require.Len(t, res.Jobs, 1)
		require.Len(t, res.Deferred, 19)
		scheduled, parked := 0, 0
		for i, d := range res.Deferred {
			if d.Parked {
				parked++
				require.True(t, d.Until.IsZero())
				require.Equal(t, engine.StateParked, state(t, s, d.JobID).State)
			} else {
				scheduled++
				require.Equal(t, at(time.Duration(i+1)*time.Minute), d.Until)
			}
		}
		require.Equal(t, 5, scheduled, "slots at 1..5 minutes: within the horizon")
		require.Equal(t, 14, parked)

		n, err := s.Unpark(ctx, engine.At(t0), horizon, 100, 0)
		require.NoError(t, err)
		require.Zero(t, n, "no slot within the horizon yet")
		n, err = s.Unpark(ctx, engine.At(at(time.Minute)), horizon, 100, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the horizon moved one slot")
		j := state(t, s, jobIDs[6])
		require.Equal(t, engine.StateScheduled, j.State, "parked jobs get slots in order")
		require.Equal(t, at(6*time.Minute), j.RunAt)
		// Slots that fell in the past (7 to 9 minutes) are not handed out:
		// at 10 minutes the horizon holds 10 to 15.
		n, err = s.Unpark(ctx, engine.At(at(10*time.Minute)), horizon, 100, 0)
		require.NoError(t, err)
		require.Equal(t, 6, n)
		require.Equal(t, at(10*time.Minute), state(t, s, jobIDs[7]).RunAt)
		bs, err := s.ListBudgets(ctx)
		require.NoError(t, err)
		require.Equal(t, 7, bs[0].Parked)
		require.Equal(t, 19, bs[0].Waiting)
	})
}

// One Unpark moves at most the batch it is given, across every budget that
// is due, and leaves each budget's parked count true to the jobs it left
// parked; calls that follow hand out the rest, in the same slots one
// unbounded call would have.
func TestUnparkMovesAtMostABatchAcrossBudgets(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Minute, 1)}
		const horizon = 5 * time.Minute
		keys := []string{"k/a", "k/b", "k/c"}
		var jobs []engine.NewJob
		for range 10 {
			for _, k := range keys {
				jobs = append(jobs, limited("k", k))
			}
		}
		enqueue(t, s, t0, jobs...)
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 30, lim, horizon)
		require.Len(t, res.Jobs, 3, "one admitted per budget")
		parked := map[string][]int64{}
		for _, d := range res.Deferred {
			if d.Parked {
				parked[d.Key] = append(parked[d.Key], d.JobID)
			}
		}
		for _, k := range keys {
			require.Len(t, parked[k], 4, "%s: slots at 1 to 5 minutes, the rest parked", k)
		}

		// At 10 minutes the horizon holds 6 slots of each budget: room for
		// all 12 parked jobs, handed out 5 at a time.
		now := engine.At(at(10 * time.Minute))
		var got []int
		for {
			n, err := s.Unpark(ctx, now, horizon, 100, 5)
			require.NoError(t, err)
			got = append(got, n)
			if n < 5 {
				break
			}
			bs, err := s.ListBudgets(ctx)
			require.NoError(t, err)
			for _, b := range bs {
				left := 0
				for _, id := range parked[b.Name] {
					if state(t, s, id).State == engine.StateParked {
						left++
					}
				}
				require.Equal(t, left, b.Parked, "%s: the count follows the jobs", b.Name)
			}
		}
		require.Equal(t, []int{5, 5, 2}, got)
		for _, k := range keys {
			for i, id := range parked[k] {
				j := state(t, s, id)
				require.Equal(t, engine.StateScheduled, j.State)
				require.Equal(t, at(time.Duration(10+i)*time.Minute), j.RunAt, "%s: the slots an unbounded call hands out", k)
			}
		}
	})
}

func TestLimitChangesFollowTheDebtRules(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		pid := register(t, s, t0)
		old := limits{"k": spec(t, "k", 10, time.Minute, 10)} // 10 at once, then one per minute
		jobs := make([]engine.NewJob, 10)
		for i := range jobs {
			jobs[i] = limited("k", "k/x")
		}
		enqueue(t, s, t0, jobs...)
		require.Len(t, claimLimited(t, s, pid, t0, 10, old, time.Hour).Jobs, 10) // TAT is now 10 minutes ahead

		// Tighter: the debt stands.
		tighter := limits{"k": spec(t, "k", 1, time.Minute, 1)}
		enqueue(t, s, at(time.Second), limited("k", "k/x"))
		res := claimLimited(t, s, pid, at(time.Second), 1, tighter, time.Hour)
		require.Empty(t, res.Jobs)
		require.Equal(t, at(10*time.Minute), res.Deferred[0].Until)

		// Looser: the debt is capped at Burst intervals of the new limit,
		// so admissions resume within one new interval. (The job deferred
		// now still queues behind the slots already handed out.)
		looser := limits{"k": spec(t, "k", 600, time.Minute, 2)} // T = 100.167 ms
		interval := time.Duration(looser["k"].Params.Interval) * time.Microsecond
		enqueue(t, s, at(2*time.Second), limited("k", "k/x"))
		res = claimLimited(t, s, pid, at(2*time.Second), 1, looser, time.Hour)
		require.Empty(t, res.Jobs)
		enqueue(t, s, at(2*time.Second), limited("k", "k/x"))
		require.Empty(t, claimLimited(t, s, pid, at(2*time.Second), 1, looser, time.Hour).Jobs)
		next := enqueue(t, s, at(2*time.Second+interval), limited("k", "k/x"))
		require.Equal(t, next, ids(claimLimited(t, s, pid, at(2*time.Second+interval), 1, looser, time.Hour).Jobs))
	})
}

func TestPausedLimitSendsOneProbeToTheHorizonAndParksTheRest(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		const horizon = 5 * time.Minute
		paused := limits{"k": spec(t, "k", 0, time.Minute, 0)}
		jobIDs := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"), limited("k", "k/x"))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 10, paused, horizon)
		require.Empty(t, res.Jobs, "nothing is admitted")
		require.Equal(t, at(horizon), res.Deferred[0].Until, "one probe waits at the horizon")
		require.True(t, res.Deferred[1].Parked)
		require.True(t, res.Deferred[2].Parked)
		n, err := s.Unpark(ctx, engine.At(at(time.Minute)), horizon, 100, 0)
		require.NoError(t, err)
		require.Zero(t, n, "while the probe is out, nothing else moves")

		// The pause is lifted: the probe comes back, is admitted, and the
		// dispatcher hands the rest slots at the new rate.
		open := limits{"k": spec(t, "k", 60, time.Minute, 1)}
		_, _, err = s.Promote(ctx, engine.At(at(horizon)), 100)
		require.NoError(t, err)
		res = claimLimited(t, s, pid, at(horizon), 10, open, horizon)
		require.Equal(t, []int64{jobIDs[0]}, ids(res.Jobs))
		// The claim that locked the budget hands them their slots itself,
		// and tells its worker when they come.
		require.Equal(t, []time.Time{at(horizon + time.Second), at(horizon + 2*time.Second)}, res.Unparked)
		n, err = s.Unpark(ctx, engine.At(at(horizon)), horizon, 100, 0)
		require.NoError(t, err)
		require.Zero(t, n, "nothing is left for the dispatcher")
		require.Equal(t, at(horizon+time.Second), state(t, s, jobIDs[1]).RunAt)
		require.Equal(t, at(horizon+2*time.Second), state(t, s, jobIDs[2]).RunAt)
	})
}

func TestClearingIdleBudgetsChangesNoDecision(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 2, time.Second, 2)}
		pid := register(t, s, t0)
		enqueue(t, s, t0, limited("k", "k/a"), limited("k", "k/b"), limited("k", "k/b"), limited("k", "k/b"))
		claimLimited(t, s, pid, t0, 10, lim, 0) // T = 1 s: k/a is idle after 1 s; k/b is 2 s ahead, a slot handed out
		n, err := s.ClearIdleBudgets(ctx, engine.At(at(999*time.Millisecond)), 10, 0)
		require.NoError(t, err)
		require.Zero(t, n, "nothing is idle yet")
		n, err = s.ClearIdleBudgets(ctx, engine.At(at(time.Second)), 10, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n, "k/a is full again and has no slot ahead")
		bs, err := s.ListBudgets(ctx)
		require.NoError(t, err)
		require.Len(t, bs, 1)
		require.Equal(t, "k/b", bs[0].Name)

		// A cleared budget admits as a fresh one: its burst.
		enqueue(t, s, at(time.Second), limited("k", "k/a"), limited("k", "k/a"), limited("k", "k/a"))
		res := claimLimited(t, s, pid, at(time.Second), 10, lim, 0)
		admittedA := 0
		for _, j := range res.Jobs {
			if j.RateKeys[0].Key == "k/a" {
				admittedA++
			}
		}
		require.Equal(t, 2, admittedA)
	})
}

func TestDatabaseClockDecides(t *testing.T) {
	for _, b := range testdb.Backends(t) {
		if b.Name == "sqlite" {
			continue // SQLite runs on the host's clock
		}
		t.Run(b.Name, func(t *testing.T) {
			s := b.Open(t)
			lim := limits{"k": spec(t, "k", 1, time.Minute, 1)}
			enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"))
			pid := register(t, s, t0)
			before := time.Now()
			res, err := s.Claim(context.Background(), engine.ClaimParams{
				ProcessID: pid, Queues: []string{"default"}, Max: 2, Clock: engine.DatabaseTime(fixed(t0)), Limits: lim,
			})
			require.NoError(t, err)
			after := time.Now()
			require.WithinRange(t, res.DecidedAt, before.Add(-2*time.Second), after.Add(2*time.Second),
				"decided on the database's clock, not the worker's (%s)", t0)
			require.Equal(t, res.DecidedAt.Add(time.Minute), res.Deferred[0].Until)
		})
	}
}

// model is the pure core run over the same trace as a store: the
// reference the store's decisions must equal.
type model struct {
	lim     limits
	horizon int64
	budgets map[string]*modelBudget
	jobs    map[int64]*modelJob
}

type modelBudget struct {
	st     ratelimit.State
	parked []int64
}

type modelJob struct {
	key    string
	state  engine.State
	runAt  int64 // µs, as jobs' times are stored
	waited bool  // it waited on its budget: it comes back to the head of the line, within one interval of its slot
}

// ceilMicros turns a slot (ns) into a job's run_at (µs), rounding up as the
// store does: a job never comes back before its slot.
func ceilMicros(ns int64) int64 { return (ns + 999) / 1000 }

func (m *model) budget(k string) *modelBudget {
	if m.budgets[k] == nil {
		m.budgets[k] = &modelBudget{}
	}
	return m.budgets[k]
}

func (m *model) promote(now int64) {
	for _, j := range m.jobs {
		if j.state == engine.StateScheduled && j.runAt <= now {
			j.state = engine.StateReady
		}
	}
}

func (m *model) unpark(now int64) {
	until := now + m.horizon
	for key, b := range m.budgets {
		p := m.lim[ratelimit.ScopeOf(key)].Params
		for len(b.parked) > 0 {
			first := max(b.st.NextSlot, now, b.st.TAT-p.Tolerance())
			if first > until {
				break
			}
			id := b.parked[0]
			b.parked = b.parked[1:]
			m.jobs[id].state, m.jobs[id].runAt = engine.StateScheduled, ceilMicros(p.Slot(&b.st, first, 1))
		}
	}
}

// claim returns the admitted ids and, per deferred id, its slot (0 when
// parked).
func (m *model) claim(now int64, limit int) ([]int64, map[int64]int64) {
	// A claim takes up to limit jobs without a key and up to limit with
	// one, in id order, and admits up to limit of them.
	var plain, keyed []int64
	for id, j := range m.jobs {
		if j.state == engine.StateReady && j.key == "" {
			plain = append(plain, id)
		} else if j.state == engine.StateReady {
			keyed = append(keyed, id)
		}
	}
	sort.Slice(plain, func(a, b int) bool { return plain[a] < plain[b] })
	sort.Slice(keyed, func(a, b int) bool { return keyed[a] < keyed[b] })
	ready := append(plain[:min(len(plain), limit)], keyed[:min(len(keyed), limit)]...)
	sort.Slice(ready, func(a, b int) bool { return ready[a] < ready[b] })
	var admitted []int64
	deferred := map[int64]int64{}
	for _, id := range ready {
		j := m.jobs[id]
		full := len(admitted) == limit
		if j.key == "" {
			if !full {
				admitted = append(admitted, id)
				j.state = engine.StateRunning
			}
			continue
		}
		p := m.lim[ratelimit.ScopeOf(j.key)].Params
		b := m.budget(j.key)
		if ok, earliest := p.Check(b.st, now, 1); ok {
			if full {
				continue // admissible, but the claim is full: it stays ready
			}
			p.Charge(&b.st, now, 1)
			admitted = append(admitted, id)
			j.state, j.waited = engine.StateRunning, false
		} else if j.waited && earliest < b.st.NextSlot && earliest <= now+m.horizon && earliest-j.runAt*1000 <= p.Interval {
			j.state, j.runAt = engine.StateScheduled, ceilMicros(earliest)
			deferred[id] = earliest
		} else if slot := max(earliest, b.st.NextSlot); slot > now+m.horizon {
			b.st.NextSlot = max(b.st.NextSlot, earliest)
			b.parked = append(b.parked, id)
			j.state, j.waited = engine.StateParked, true
			deferred[id] = 0
		} else {
			slot := p.Slot(&b.st, earliest, 1)
			j.state, j.runAt, j.waited = engine.StateScheduled, ceilMicros(slot), true
			deferred[id] = slot
		}
	}
	return admitted, deferred
}

func TestStoreDecisionsEqualThePureCoreOnRandomTraces(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		for seed := uint64(1); seed <= 48; seed++ {
			r := rand.New(rand.NewPCG(seed, 7))
			prefix := fmt.Sprintf("s%d", seed)
			lim := limits{}
			for _, k := range []string{"a", "b"} {
				to := 1 + r.IntN(20)
				lim[prefix+k] = spec(t, prefix+k, to, time.Duration(10+r.IntN(2000))*time.Millisecond*time.Duration(to), 1+r.IntN(to))
			}
			horizon := time.Duration(1+r.IntN(30)) * time.Second
			m := &model{lim: lim, horizon: horizon.Nanoseconds(), budgets: map[string]*modelBudget{}, jobs: map[int64]*modelJob{}}
			queue := prefix
			now := t0.Add(time.Duration(seed) * 24 * time.Hour)
			for step := 0; step < 60; step++ {
				switch op := r.IntN(4); op {
				case 0: // enqueue
					for n := 1 + r.IntN(4); n > 0; n-- {
						key := ""
						j := job("k", queue, 0)
						if c := r.IntN(3); c < 2 {
							scope := prefix + []string{"a", "b"}[c]
							key = scope + "/" + fmt.Sprint(r.IntN(2))
							j.RateKeys = []engine.RateKey{{Key: key, Cost: 1}}
						}
						id := enqueue(t, s, now, j)[0]
						m.jobs[id] = &modelJob{key: key, state: engine.StateReady}
					}
				case 1: // time passes
					now = now.Add(time.Duration(r.IntN(1500)) * time.Millisecond)
				case 2: // the dispatcher
					_, _, err := s.Promote(ctx, engine.At(now), 1000)
					require.NoError(t, err)
					_, err = s.Unpark(ctx, engine.At(now), horizon, 100, 0)
					require.NoError(t, err)
					m.promote(engine.Micros(now))
					m.unpark(engine.Nanos(now))
				case 3: // a worker claims
					limit := 1 + r.IntN(6)
					res := claimLimited(t, s, pid, now, limit, lim, horizon, queue)
					wantAdmitted, wantDeferred := m.claim(engine.Nanos(now), limit)
					require.ElementsMatch(t, wantAdmitted, ids(res.Jobs), "seed %d step %d: admitted", seed, step)
					got := map[int64]int64{}
					for _, d := range res.Deferred {
						got[d.JobID] = 0
						if !d.Parked {
							got[d.JobID] = engine.Nanos(d.Until)
						}
					}
					require.Equal(t, wantDeferred, got, "seed %d step %d: deferred", seed, step)
				}
			}
		}
	})
}

func TestADeepBacklogMovesEachJobAFixedNumberOfTimes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		// SQLite, whose every row costs many times more under -race, gets
		// the drain scaled down by ten: a tenth of the backlog, of the
		// limit (T = 110 ms: 9 a second after the burst) and of the
		// batches, over the same horizon and the same seconds of fake
		// time. As many jobs wait past the horizon, and a job that moved
		// once for each second it waited, or for each batch of the
		// backlog, still moves as many times.
		div := 1
		if s.Dialect().Name() == "sqlite" {
			div = 10
		}
		backlog, batch := 10000/div, 1000/div
		const horizon = 30 * time.Second
		lim := limits{"bulk": spec(t, "bulk", 1000/div, 10*time.Second, 100/div)} // T = 11.1 ms: 90 a second after the burst
		jobs := make([]engine.NewJob, backlog)
		for i := range jobs {
			jobs[i] = limited("bulk", "bulk/global")
		}
		enqueue(t, s, t0, jobs...)
		pid := register(t, s, t0)
		moves, admitted, parkedOnce := 0, 0, 0
		now := t0
		for admitted < backlog {
			n, _, err := s.Promote(ctx, engine.At(now), 5*batch)
			require.NoError(t, err)
			u, err := s.Unpark(ctx, engine.At(now), horizon, 100, batch)
			require.NoError(t, err)
			moves += n + u
			for {
				res := claimLimited(t, s, pid, now, batch, lim, horizon)
				admitted += len(res.Jobs)
				moves += len(res.Jobs) + len(res.Deferred)
				for _, d := range res.Deferred {
					if d.Parked {
						parkedOnce++
					}
				}
				if len(res.Jobs)+len(res.Deferred) < batch {
					break
				}
			}
			now = now.Add(time.Second)
			require.Less(t, now.Sub(t0), 20*time.Minute, "the backlog should drain at about 90 a second")
		}
		perJob := float64(moves) / float64(admitted)
		t.Logf("%s: %d jobs drained in %s of fake time with %d row moves: %.2f per job (%d parked)",
			s.Dialect().Name(), admitted, now.Sub(t0), moves, perJob, parkedOnce)
		require.Greater(t, parkedOnce, backlog/2, "most of the backlog waited past the horizon")
		require.LessOrEqual(t, perJob, 5.0, "each job moves a fixed number of times, whatever the backlog")
	})
}

func TestAWiderWindowDefersPastMaxButClaimsOnlyMax(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"k": spec(t, "k", 1, time.Hour, 1)}
		got := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"), job("free", "default", 0),
			limited("k", "k/x"), job("free", "default", 0), job("free", "default", 0))
		pid := register(t, s, t0)
		res, err := s.Claim(context.Background(), engine.ClaimParams{
			ProcessID: pid, Queues: []string{"default"}, Max: 1, Candidates: 6, Clock: engine.At(t0), Limits: lim,
		})
		require.NoError(t, err)
		require.Equal(t, []int64{got[0]}, ids(res.Jobs))
		require.Equal(t, []int64{got[1], got[3]}, []int64{res.Deferred[0].JobID, res.Deferred[1].JobID})
		for _, i := range []int{2, 4, 5} {
			require.Equal(t, engine.StateReady, state(t, s, got[i]).State, "past Max, an admissible job stays ready")
		}
		// Without a keyed job among the candidates, still only Max.
		res, err = s.Claim(context.Background(), engine.ClaimParams{
			ProcessID: pid, Queues: []string{"default"}, Max: 2, Candidates: 6, Clock: engine.At(t0), Limits: lim,
		})
		require.NoError(t, err)
		require.Equal(t, []int64{got[2], got[4]}, ids(res.Jobs))
	})
}

// TestClearingIdleBudgetsWhileClaimingKeepsTheLimit races the idle-budget
// cleaner against claims: bursts on three budgets, each budget idle between
// them, the cleaner deleting idle rows as fast as it can. A row it deleted
// must admit exactly as it would have, so no window of a budget may hold
// more than To claims.
func TestClearingIdleBudgetsWhileClaimingKeepsTheLimit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		const per = 50 * time.Millisecond
		lim := limits{"k": spec(t, "k", 5, per, 5)} // 5 at once, then one every 50 ms
		clk := clock.NewFake(t0)
		pid := register(t, s, t0)
		admitted := map[string][]time.Time{}
		done := make(chan struct{})
		var wg sync.WaitGroup
		var cleared atomic.Int64
		stopped := make(chan struct{})
		wg.Add(1)
		go func() { // the cleaner, as often as it can
			defer wg.Done()
			defer close(stopped)
			for {
				select {
				case <-done:
					return
				default:
				}
				n, err := s.ClearIdleBudgets(ctx, engine.HostTime(clk.Now), 10, 0)
				if !assertNoErr(t, err) {
					return
				}
				cleared.Add(int64(n))
			}
		}()
		total := 0
		for round := 0; round < 8; round++ {
			var jobs []engine.NewJob
			for i := 0; i < 21; i++ {
				jobs = append(jobs, limited("k", fmt.Sprintf("k/%d", i%3)))
			}
			enqueue(t, s, clk.Now(), jobs...)
			for got := 0; got < len(jobs); {
				_, _, err := s.Promote(ctx, engine.At(clk.Now()), 1000)
				require.NoError(t, err)
				res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 50, Clock: engine.HostTime(clk.Now), Limits: lim})
				require.NoError(t, err)
				for _, j := range res.Jobs {
					admitted[j.RateKeys[0].Key] = append(admitted[j.RateKeys[0].Key], res.DecidedAt)
				}
				got += len(res.Jobs)
				clk.Advance(5 * time.Millisecond)
			}
			total += len(jobs)
			clk.Advance(time.Second)                  // every budget goes idle
			for cleared.Load() < int64(3*(round+1)) { // the cleaner clears the three rows
				select {
				case <-stopped:
					t.Fatal("the cleaner stopped")
				default:
					runtime.Gosched()
				}
			}
		}
		close(done)
		wg.Wait()
		t.Logf("%s: the cleaner deleted %d idle budget rows while %d jobs were claimed", s.Dialect().Name(), cleared.Load(), total)
		for key, times := range admitted {
			best, j := 0, 0
			for i := range times {
				for times[i].Sub(times[j]) >= per {
					j++
				}
				best = max(best, i-j+1)
			}
			require.LessOrEqual(t, best, 5, "%s: a cleared row let a burst through", key)
		}
	})
}
