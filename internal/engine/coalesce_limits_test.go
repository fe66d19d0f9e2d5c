package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Coalescing meets a concurrency limit, a rate limit, fair shares and
// operators.

// debounced is a job of queue default that coalesces on co with a debounce
// of d (no MaxDelay) and holds a slot of conc (To 1).
func debounced(co, conc string, d time.Duration) engine.NewJob {
	j := job("k", "default", 0)
	j.Coalesce = &engine.Coalesce{Key: co, Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard, Debounce: d}}
	j.Conc = &engine.Conc{Key: conc, To: 1, Duration: 3 * time.Minute}
	return j
}

// readyAndBlocked enqueues the pending jobs a and b of one account's
// concurrency key (To 1), debounced by a second, and promotes them: a,
// first, takes the slot, and b is blocked behind it.
func readyAndBlocked(t *testing.T, s *engine.Store) (a, b int64) {
	t.Helper()
	a = enqueue(t, s, t0, debounced("co/a", "acct/1", time.Second))[0]
	b = enqueue(t, s, t0, debounced("co/b", "acct/1", time.Second))[0]
	_, _, err := s.Promote(context.Background(), engine.At(at(time.Second)), 10)
	require.NoError(t, err)
	require.Equal(t, engine.StateReady, state(t, s, a).State)
	require.True(t, state(t, s, a).HoldsSlot)
	require.Equal(t, engine.StateBlocked, state(t, s, b).State)
	return a, b
}

// docs/concurrency.md, What is guaranteed: "every blocked job runs: no
// blocked job stays blocked while its key has a free slot for longer than
// one dispatcher tick"; docs/coalesce.md: with Debounce a call moves the
// pending job to now + Debounce, and a ready job goes back to scheduled
// and gives its concurrency slot back.
//
// One concurrency key per account (To 1), one coalesce key per resource,
// debounced (no MaxDelay). Resource a's pending job comes due first and
// takes the account's slot (ready); b's is blocked. Before a worker claims
// a's (a busy or paused queue), calls on a keep coming, each within the
// debounce: a's job goes back to scheduled each time. Had it kept the
// slot while it waits, b would stay blocked for as long as the calls on a
// go on — here a minute, without end in general — though no job of the
// account runs, nor can.
func TestADebouncedJobDoesNotHoldItsSlotWhileCallsPostponeIt(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		a, b := readyAndBlocked(t, s)

		// Calls on a every half second for a minute; the dispatcher ticks
		// every half second; a worker claims every tick.
		pid := register(t, s, t0)
		for now := at(1100 * time.Millisecond); now.Before(at(61 * time.Second)); now = now.Add(500 * time.Millisecond) {
			res, err := s.Enqueue(ctx, nil, engine.At(now), []engine.NewJob{debounced("co/a", "acct/1", time.Second)})
			require.NoError(t, err)
			require.Equal(t, a, res[0].ID)
			_, _, err = s.Promote(ctx, engine.At(now), 10)
			require.NoError(t, err)
			_, _, err = s.MaintainSemaphores(ctx, engine.At(now), 10)
			require.NoError(t, err)
			if got := claim(t, s, pid, now, 5).Jobs; len(got) > 0 {
				require.Equal(t, []int64{b}, ids(got), "only b can run: a is postponed by its calls")
				return
			}
		}
		ja, jb := state(t, s, a), state(t, s, b)
		t.Fatalf("after a minute of calls on a, b is still %s; a is %s (holds the account's slot: %v), postponed by the calls: no job of acct/1 ran or could run",
			jb.State, ja.State, ja.HoldsSlot)
	})
}

// A coalesced, debounced, fair job whose
// concurrency key is held and whose rate budget is spent, moved by an
// operator mid-way. docs/concurrency.md: a slot "is given back exactly
// once"; docs/coalesce.md: a job that finishes without being claimed
// (cancelled by an operator) releases its key; docs/fairness.md: an
// operator's cancel of fair jobs that were never claimed gives their
// key's turns back, and cancelling the same jobs again changes nothing
// more.
func TestAnOperatorMovesADebouncedFairJobThroughItsLimits(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"r": spec(t, "r", 1, 10*time.Second, 1)}
		pid := register(t, s, t0)
		held := func(want int, when string) {
			t.Helper()
			sem := heldMatchesHolders(t, s, "acct")
			require.Equal(t, want, sem.Held, "acct's slots held %s", when)
		}
		mk := func() engine.NewJob {
			j := debounced("co/j", "acct", time.Second)
			j.RateKeys = []engine.RateKey{{Key: "r/x", Cost: 1}}
			j.FairKey, j.FairWeight = "f/a", 1
			return j
		}
		other := func(key string) engine.NewJob {
			j := fairJob(key, 1)
			j.Queue = "default"
			return j
		}
		// Another key's jobs, ready, for the level's virtual time.
		enqueue(t, s, t0, other("f/b"), other("f/b"), other("f/b"))
		// H holds acct and runs; X spends r/x.
		h := slotted("acct", 1)
		x := limited("k", "r/x")
		hx := enqueue(t, s, t0, h, x)
		res := claimLimited(t, s, pid, t0, 2, lim, time.Minute)
		require.ElementsMatch(t, hx, ids(res.Jobs))
		running := res.Jobs
		j := enqueue(t, s, t0, mk())[0]
		require.Equal(t, engine.StateScheduled, state(t, s, j).State, "debounced")

		// Due at 1 s, blocked on acct; a call at 1.2 s sends it back to
		// wait out the debounce, without a slot.
		_, _, err := s.Promote(ctx, engine.At(at(time.Second)), 10)
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, state(t, s, j).State)
		r, err := s.Enqueue(ctx, nil, engine.At(at(1200*time.Millisecond)), []engine.NewJob{mk()})
		require.NoError(t, err)
		require.True(t, r[0].Joined)
		require.Equal(t, engine.StateScheduled, state(t, s, j).State)
		held(1, "by H")

		// H finishes; at 2.2 s J takes the free slot, and a claim defers it
		// on r/x, spent by X: it gives the slot back.
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(1500*time.Millisecond)), engine.Outcomes{Completed: runsOf(running), SlotHolders: runsOf(running[:1])}))
		held(0, "after H")
		_, _, err = s.Promote(ctx, engine.At(at(2200*time.Millisecond)), 10)
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, state(t, s, j).State)
		held(1, "by J, ready")
		res, err = s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 1, Candidates: 5, Clock: engine.At(at(2200 * time.Millisecond)),
			Limits: lim, Horizon: time.Minute, Fair: true})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1, "a job of f/b")
		require.NotEqual(t, j, res.Jobs[0].ID)
		jj := state(t, s, j)
		require.Equal(t, engine.StateScheduled, jj.State, "deferred on r/x")
		require.False(t, jj.HoldsSlot)
		held(0, "J deferred")

		// The operator retries J (it takes the slot again), then cancels it
		// (it gives it back), then cancels it again (refused, nothing moves).
		moved, err := s.RetryJobs(ctx, engine.At(at(3*time.Second)), []int64{j})
		require.NoError(t, err)
		require.Equal(t, []engine.Moved{{ID: j, State: engine.StateReady}}, moved)
		held(1, "J retried")
		_, err = s.CancelJobs(ctx, engine.At(at(3*time.Second)), []int64{j}, "")
		require.NoError(t, err)
		held(0, "J cancelled")
		_, err = s.CancelJobs(ctx, engine.At(at(3*time.Second)), []int64{j}, "")
		require.ErrorIs(t, err, engine.ErrNotAllowed)
		held(0, "J cancelled twice")

		// Its key is free: the next call starts a job, and f/a's turn was
		// given back: that job starts beside a new key's.
		r, err = s.Enqueue(ctx, nil, engine.At(at(3*time.Second)), []engine.NewJob{mk(), other("f/z")})
		require.NoError(t, err)
		require.False(t, r[0].Joined, "J released co/j")
		require.Equal(t, state(t, s, r[1].ID).FairStart, state(t, s, r[0].ID).FairStart,
			"f/a's next job starts at the level's virtual time, as a new key's does: J never ran")
	})
}

// The slot a debounced job gives back goes to its key's first blocked job
// in the call's own transaction, as a completion's does; the debounced
// job takes a slot again when it comes due, or is blocked behind that job.
func TestADebouncedJobHandsItsSlotToTheFirstBlockedJobAtOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		a, b := readyAndBlocked(t, s)
		res, err := s.Enqueue(ctx, nil, engine.At(at(1500*time.Millisecond)), []engine.NewJob{debounced("co/a", "acct/1", time.Second)})
		require.NoError(t, err)
		require.Equal(t, engine.StateScheduled, res[0].State)
		ja, jb := state(t, s, a), state(t, s, b)
		require.False(t, ja.HoldsSlot, "a gave its slot back")
		require.Equal(t, at(2500*time.Millisecond), ja.RunAt)
		require.Equal(t, engine.StateReady, jb.State, "b took it in the same transaction")
		require.True(t, jb.HoldsSlot)
		require.Equal(t, 1, heldMatchesHolders(t, s, "acct/1").Held)

		_, _, err = s.Promote(ctx, engine.At(at(2500*time.Millisecond)), 10)
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, state(t, s, a).State, "due, behind b")
		pid := register(t, s, t0)
		got := claim(t, s, pid, at(2500*time.Millisecond), 5)
		require.Equal(t, []int64{b}, ids(got.Jobs))
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(3*time.Second)), engine.Outcomes{Completed: runsOf(got.Jobs), SlotHolders: runsOf(got.Jobs)}))
		require.Equal(t, engine.StateReady, state(t, s, a).State, "b's slot goes to a")
		require.Equal(t, 1, heldMatchesHolders(t, s, "acct/1").Held)
	})
}

// A debounced job that gave its slot back is, when it comes due, a job
// becoming ready as it was the first time: with OnConflict Discard it is
// discarded if its key has no free slot then (docs/coalesce.md).
func TestADebouncedDiscardJobThatGaveItsSlotBackIsDiscardedOnABusyKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		mk := func() engine.NewJob {
			j := debounced("co/a", "acct/1", time.Second)
			j.Conc.Discard = true
			return j
		}
		a := enqueue(t, s, t0, mk())[0]
		_, _, err := s.Promote(ctx, engine.At(at(time.Second)), 10)
		require.NoError(t, err)
		require.True(t, state(t, s, a).HoldsSlot)
		_, err = s.Enqueue(ctx, nil, engine.At(at(1500*time.Millisecond)), []engine.NewJob{mk()})
		require.NoError(t, err)
		require.Zero(t, heldMatchesHolders(t, s, "acct/1").Held)
		other := enqueue(t, s, at(1600*time.Millisecond), slotted("acct/1", 1))[0]
		require.Equal(t, engine.StateReady, state(t, s, other).State, "the free slot")

		_, _, err = s.Promote(ctx, engine.At(at(2500*time.Millisecond)), 10)
		require.NoError(t, err)
		ja := state(t, s, a)
		require.Equal(t, engine.StateCancelled, ja.State)
		require.Contains(t, ja.LastError, engine.DiscardedError)
		require.Equal(t, 1, heldMatchesHolders(t, s, "acct/1").Held)
	})
}

// Several calls of one enqueue on a pending job that holds a slot: the
// first sends it back to wait and gives its slot back, once; the last
// fills it and dispatches it, and it takes a slot again — the one it gave
// back, or, when that went to a blocked job, none: it is blocked.
func TestCallsThatDebounceAndDispatchOneJobGiveItsSlotBackOnce(t *testing.T) {
	for _, blocked := range []bool{false, true} {
		t.Run(fmt.Sprintf("blocked=%v", blocked), func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, s *engine.Store) {
				ctx := context.Background()
				mk := func() engine.NewJob {
					j := job("k", "default", 0)
					j.Coalesce = &engine.Coalesce{Key: "co/a", Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Collect, MaxCalls: 3,
						Dispatch: true, Debounce: time.Second}}
					j.Conc = &engine.Conc{Key: "acct/1", To: 1, Duration: 3 * time.Minute}
					return j
				}
				a := enqueue(t, s, t0, mk())[0]
				_, _, err := s.Promote(ctx, engine.At(at(time.Second)), 10)
				require.NoError(t, err)
				require.True(t, state(t, s, a).HoldsSlot)
				var b int64
				if blocked {
					b = enqueue(t, s, at(time.Second), slotted("acct/1", 1))[0]
					require.Equal(t, engine.StateBlocked, state(t, s, b).State)
				}

				res, err := s.Enqueue(ctx, nil, engine.At(at(1500*time.Millisecond)), []engine.NewJob{mk(), mk()})
				require.NoError(t, err)
				require.Equal(t, []int64{a, a}, []int64{res[0].ID, res[1].ID})
				ja := state(t, s, a)
				if blocked {
					require.Equal(t, engine.StateBlocked, ja.State, "dispatched behind b, which took its slot")
					require.Equal(t, engine.StateReady, state(t, s, b).State)
				} else {
					require.Equal(t, engine.StateReady, ja.State, "dispatched: it took the slot again")
					require.True(t, ja.HoldsSlot)
				}
				require.Equal(t, 3, ja.Calls)
				require.Equal(t, 1, heldMatchesHolders(t, s, "acct/1").Held)
			})
		})
	}
}
