package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

func slotted(key string, to int) engine.NewJob {
	j := job("k", "default", 0)
	j.Conc = &engine.Conc{Key: key, To: to, Duration: 3 * time.Minute}
	return j
}

func semaphore(t *testing.T, s *engine.Store, key string) engine.SemaphoreInfo {
	t.Helper()
	all, err := s.ListSemaphores(context.Background())
	require.NoError(t, err)
	for _, i := range all {
		if i.Name == key {
			return i
		}
	}
	t.Fatalf("no semaphore %s in %+v", key, all)
	return engine.SemaphoreInfo{}
}

func TestAJobTakesASlotWhenReadyOrIsBlocked(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		got := enqueue(t, s, t0, slotted("acct/1", 2), slotted("acct/1", 2), slotted("acct/1", 2), slotted("acct/2", 2), slotted("acct/1", 2))
		for i, want := range []engine.State{engine.StateReady, engine.StateReady, engine.StateBlocked, engine.StateReady, engine.StateBlocked} {
			j := state(t, s, got[i])
			require.Equal(t, want, j.State, "job %d", i)
			require.Equal(t, want == engine.StateReady, j.HoldsSlot, "job %d", i)
		}
		sem := semaphore(t, s, "acct/1")
		require.Equal(t, 2, sem.Held)
		require.Zero(t, sem.Free())
		require.Equal(t, 2, sem.Limit)
		require.Equal(t, 2, sem.Blocked)
		require.Equal(t, 2, sem.Holding)
		require.Equal(t, engine.Micros(at(3*time.Minute)), sem.ExpiresAt)
		pid := register(t, s, t0)
		require.ElementsMatch(t, []int64{got[0], got[1], got[3]}, ids(claim(t, s, pid, t0, 10).Jobs), "blocked jobs are not claimed")
	})
}

func TestFinishingGivesTheSlotToTheFirstBlockedJob(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		low := slotted("a", 1)
		low.Priority = 5
		got := enqueue(t, s, t0, slotted("a", 1), low, slotted("a", 1))
		pid := register(t, s, t0)
		require.Equal(t, []int64{got[0]}, ids(claim(t, s, pid, t0, 10).Jobs))

		// A retry keeps its slot while it waits.
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), engine.Outcomes{Others: ran(t, s, engine.Transition{ID: got[0], State: engine.StateScheduled, RunAt: at(time.Minute), Error: "again"})}))
		require.Equal(t, engine.StateBlocked, state(t, s, got[2]).State)
		require.True(t, state(t, s, got[0]).HoldsSlot)
		n, _, err := s.Promote(ctx, engine.At(at(time.Minute)), 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, []int64{got[0]}, ids(claim(t, s, pid, at(time.Minute), 10).Jobs), "it comes back with its slot")

		// Finishing for good hands the slot to the first blocked job, by
		// priority then id.
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(2*time.Minute)), engine.Outcomes{Completed: runs(t, s, got[0]), SlotHolders: runs(t, s, got[0])}))
		j := state(t, s, got[2])
		require.Equal(t, engine.StateReady, j.State)
		require.True(t, j.HoldsSlot)
		require.False(t, state(t, s, got[0]).HoldsSlot)
		require.Equal(t, engine.StateBlocked, state(t, s, got[1]).State)
		require.Equal(t, 1, semaphore(t, s, "a").Held, "the slot passed on, not freed")

		require.Equal(t, []int64{got[2]}, ids(claim(t, s, pid, at(2*time.Minute), 10).Jobs))
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(3*time.Minute)), engine.Outcomes{Others: ran(t, s, engine.Transition{ID: got[2], State: engine.StateFailed, Error: "x", Finished: true}), SlotHolders: runs(t, s, got[2])}))
		require.Equal(t, engine.StateReady, state(t, s, got[1]).State, "a failure gives the slot back too")
		require.Equal(t, []int64{got[1]}, ids(claim(t, s, pid, at(3*time.Minute), 10).Jobs))
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(4*time.Minute)), engine.Outcomes{Completed: runs(t, s, got[1]), SlotHolders: runs(t, s, got[1])}))
		sem := semaphore(t, s, "a")
		require.Zero(t, sem.Held, "with nobody blocked, the slot is free")
		require.Equal(t, 1, sem.Free())
		require.Zero(t, sem.Holding)
	})
}

func TestDiscardDiscardsAndSaysSo(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		d := slotted("a", 1)
		d.Conc.Discard = true
		got := enqueue(t, s, t0, d, d)
		require.Equal(t, engine.StateReady, state(t, s, got[0]).State)
		j := state(t, s, got[1])
		require.Equal(t, engine.StateCancelled, j.State)
		require.Equal(t, "discarded: no concurrency slot free for a", j.LastError)
		require.Equal(t, t0, j.FinishedAt)
	})
}

func TestAScheduledJobTakesItsSlotWhenPromoted(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		later := slotted("a", 1)
		later.RunAt = at(time.Minute)
		got := enqueue(t, s, t0, later, slotted("a", 1))
		require.Equal(t, engine.StateScheduled, state(t, s, got[0]).State)
		require.True(t, state(t, s, got[1]).HoldsSlot, "the ready job took the only slot")
		_, _, err := s.Promote(ctx, engine.At(at(time.Minute)), 10)
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, state(t, s, got[0]).State, "promoted to a taken slot: blocked")

		d := slotted("b", 1)
		d.Conc.Discard = true
		d.RunAt = at(2 * time.Minute)
		dd := enqueue(t, s, t0, d, slotted("b", 1))
		_, _, err = s.Promote(ctx, engine.At(at(2*time.Minute)), 10)
		require.NoError(t, err)
		require.Equal(t, engine.StateCancelled, state(t, s, dd[0]).State)

		free := slotted("c", 1)
		free.RunAt = at(3 * time.Minute)
		c := enqueue(t, s, t0, free)
		_, _, err = s.Promote(ctx, engine.At(at(3*time.Minute)), 10)
		require.NoError(t, err)
		j := state(t, s, c[0])
		require.Equal(t, engine.StateReady, j.State)
		require.True(t, j.HoldsSlot)
	})
}

func TestARateDeferralGivesTheSlotBack(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"r": spec(t, "r", 1, time.Minute, 1)}
		both := func() engine.NewJob {
			j := slotted("acct", 1)
			j.RateKeys = []engine.RateKey{{Key: "r/global", Cost: 1}}
			return j
		}
		first := enqueue(t, s, t0, both())
		pid := register(t, s, t0)
		require.Len(t, claimLimited(t, s, pid, t0, 1, lim, 0).Jobs, 1) // spends the minute's budget
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runs(t, s, first...), SlotHolders: runs(t, s, first...)}))

		got := enqueue(t, s, at(time.Second), both(), both())
		require.Equal(t, engine.StateBlocked, state(t, s, got[1]).State)
		res := claimLimited(t, s, pid, at(time.Second), 1, lim, 0)
		require.Empty(t, res.Jobs)
		require.Len(t, res.Deferred, 1)
		j := state(t, s, got[0])
		require.Equal(t, engine.StateScheduled, j.State)
		require.False(t, j.HoldsSlot, "waiting on its rate, it gives its slot back")
		j = state(t, s, got[1])
		require.Equal(t, engine.StateReady, j.State, "the next blocked job takes it")
		require.True(t, j.HoldsSlot)

		// The first comes back at its slot and finds the slot taken.
		_, _, err := s.Promote(ctx, engine.At(at(time.Minute)), 10)
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, state(t, s, got[0]).State)
	})
}

func TestExpiredSlotsAreFreedAndBlockedJobsReleased(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, slotted("a", 1), slotted("a", 1))
		dead := register(t, s, t0)
		claim(t, s, dead, t0, 1) // its process dies holding the slot

		freed, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(3*time.Minute-time.Second)), 100)
		require.NoError(t, err)
		require.Zero(t, freed+unblocked, "not expired yet")
		freed, unblocked, err = s.MaintainSemaphores(ctx, engine.At(at(3*time.Minute+time.Second)), 100)
		require.NoError(t, err)
		require.Equal(t, 1, freed)
		require.Equal(t, 1, unblocked)
		j := state(t, s, got[1])
		require.Equal(t, engine.StateReady, j.State)
		require.True(t, j.HoldsSlot)
		require.Equal(t, 1, semaphore(t, s, "a").Held)
		require.False(t, state(t, s, got[0]).HoldsSlot, "the presumed-lost holder lost its slot")

		// The lost holder finishing later gives nothing back: the slot it
		// held was handed on, and the new holder still holds it.
		require.NoError(t, s.Finish(ctx, dead, engine.At(at(4*time.Minute)), engine.Outcomes{Completed: runs(t, s, got[:1]...), SlotHolders: runs(t, s, got[:1]...)}))
		sem := semaphore(t, s, "a")
		require.Equal(t, 1, sem.Held)
		require.Equal(t, 1, sem.Holding)
		require.Zero(t, sem.Free(), "one holder for To 1")
	})
}

func TestMaintenanceReleasesABlockedJobThatMissedAFreeSlot(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, slotted("a", 1), slotted("a", 1))
		// As if the holder gave its slot back in a transaction that raced
		// the block.
		_, err := s.DB().Exec(ctx, "UPDATE sluice_semaphores SET held = 0 WHERE name = 'a'")
		require.NoError(t, err)
		_, err = s.DB().Exec(ctx, fmt.Sprintf("UPDATE sluice_jobs SET holds_slot = %s WHERE id = %d", map[bool]string{true: "false", false: "0"}[s.Dialect().Name() == "postgres"], got[0]))
		require.NoError(t, err)
		_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(t0), 100)
		require.NoError(t, err)
		require.Equal(t, 1, unblocked)
		require.Equal(t, engine.StateReady, state(t, s, got[1]).State)
		require.Equal(t, 1, semaphore(t, s, "a").Held)
	})
}

func TestOperatorsCancelGivesBackAndRetryTakes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, slotted("a", 1), slotted("a", 1))
		_, err := s.CancelJobs(ctx, engine.At(t0), got[:1], "")
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, state(t, s, got[1]).State, "cancelling the holder hands its slot on")
		require.True(t, state(t, s, got[1]).HoldsSlot)

		_, err = s.RetryJobs(ctx, engine.At(t0), got[:1])
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, state(t, s, got[0]).State, "a retried job takes a slot or waits for one")
		_, err = s.CancelJobs(ctx, engine.At(t0), got[:1], "")
		require.NoError(t, err, "a blocked job can be cancelled")
	})
}

// TestSlotsStayWithinBoundsUnderConcurrency races enqueuers and finishers
// over a few keys and checks the invariant: 0 ≤ free ≤ To, and free plus
// holders is To.
func TestSlotsStayWithinBoundsUnderConcurrency(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		keys := []string{"a", "b", "c"}
		const to = 2
		pid := register(t, s, t0)
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, 1))
				for i := 0; i < 25; i++ {
					key := keys[r.IntN(len(keys))]
					if _, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{slotted(key, to)}); !assertNoErr(t, err) {
						return
					}
					res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 2, Clock: engine.At(t0)})
					if !assertNoErr(t, err) {
						return
					}
					var holders []engine.Run
					for _, j := range res.Jobs {
						if j.HoldsSlot {
							holders = append(holders, j.Run())
						}
					}
					if !assertNoErr(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runsOf(res.Jobs), SlotHolders: holders})) {
						return
					}
				}
			}(uint64(w))
		}
		wg.Wait()
		for _, k := range keys {
			sem := semaphore(t, s, k)
			require.GreaterOrEqual(t, sem.Held, 0, k)
			require.LessOrEqual(t, sem.Held, to, k)
			require.Equal(t, sem.Held, sem.Holding, "%s: held %d, holding jobs %d", k, sem.Held, sem.Holding)
			if sem.Blocked > 0 {
				require.Zero(t, sem.Free(), fmt.Sprintf("%s: a blocked job while a slot is free", k))
			}
		}
	})
}

// concLimited is a job of kind k on budget key that holds a concurrency
// slot of conc, whose kind declared To: to when it was enqueued.
func concLimited(key, conc string, to int) engine.NewJob {
	j := limited("k", key)
	j.Conc = &engine.Conc{Key: conc, To: to, Duration: 3 * time.Minute}
	return j
}

// docs/concurrency.md: "Lowering To takes
// no slot from a job that holds one: no slot is handed out until the
// holders are fewer than the new To." and "never more than To jobs of one
// key running at once, except ... while the holders taken under a higher
// To finish".
//
// A job enqueued under To 2 that its rate limit deferred gave its slot
// back ("A job waiting on a rate limit gives its slot back"). The deploy
// then lowers To to 1: a new job of the key is blocked, as the one holder
// fills To 1. When the deferred job comes back for its slot, it must not
// be handed a slot while that holder still runs: the key's To is 1 now.
// (It used to declare the To 2 it was enqueued under again, which only an
// enqueue does now.)
func TestARateDeferredJobComingBackDoesNotRaiseALoweredConcurrencyLimit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"k": spec(t, "k", 1, 10*time.Second, 1)}
		old := enqueue(t, s, t0, concLimited("k/a", "c", 2), concLimited("k/a", "c", 2))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 10, lim, engine.DefaultHorizon)
		require.Equal(t, old[:1], ids(res.Jobs), "the budget admits one")
		require.Len(t, res.Deferred, 1)
		require.Equal(t, engine.StateScheduled, state(t, s, old[1]).State)
		require.False(t, state(t, s, old[1]).HoldsSlot, "the deferred job gave its slot back")
		require.Equal(t, 1, semaphore(t, s, "c").Held)

		// The deploy lowers To to 1: the new job finds the key full.
		low := enqueue(t, s, at(time.Second), concLimited("k/b", "c", 1))
		require.Equal(t, engine.StateBlocked, state(t, s, low[0]).State, "one holder fills the new To 1")
		require.Equal(t, 1, semaphore(t, s, "c").Limit)

		// The deferred job's slot comes; the first job still runs.
		_, _, err := s.Promote(context.Background(), engine.At(at(10*time.Second)), 100)
		require.NoError(t, err)
		res = claimLimited(t, s, pid, at(10*time.Second), 10, lim, engine.DefaultHorizon)
		running := 1 + len(res.Jobs)
		sem := semaphore(t, s, "c")
		require.LessOrEqual(t, running, 1,
			"%d jobs of key c run at once under To 1 (semaphore: held %d, limit %d; the returning job is %s, holds_slot=%v)",
			running, sem.Held, sem.Limit, state(t, s, old[1]).State, state(t, s, old[1]).HoldsSlot)
	})
}

// A delayed job declares its limit when it is enqueued (docs/concurrency.md,
// "Lowering To"), and takes its slot when its time comes under the key's
// limit as it is then: a job delayed under To 2 before a deploy lowered
// To to 1 does not raise it again as it becomes ready.
func TestADelayedJobComingDueDoesNotRaiseALoweredConcurrencyLimit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		later := slotted("a", 2)
		later.RunAt = at(time.Minute)
		old := enqueue(t, s, t0, slotted("a", 2), later)
		require.Equal(t, engine.StateScheduled, state(t, s, old[1]).State)
		require.Equal(t, 2, semaphore(t, s, "a").Limit)

		// The deploy lowers To to 1: the one holder fills it.
		low := enqueue(t, s, at(time.Second), slotted("a", 1))
		require.Equal(t, engine.StateBlocked, state(t, s, low[0]).State)
		_, _, err := s.Promote(ctx, engine.At(at(time.Minute)), 10)
		require.NoError(t, err)
		require.Equal(t, engine.StateBlocked, state(t, s, old[1]).State, "one holder fills To 1")
		sem := semaphore(t, s, "a")
		require.Equal(t, 1, sem.Limit)
		require.Equal(t, 1, sem.Held)
	})
}

// Raising To still works by an enqueue, a delayed one too: its limit is
// declared at once, and the job takes the second slot when its time comes.
func TestADelayedEnqueueRaisesTheLimit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		first := enqueue(t, s, t0, slotted("a", 1))
		require.True(t, state(t, s, first[0]).HoldsSlot)
		later := slotted("a", 2)
		later.RunAt = at(time.Minute)
		raised := enqueue(t, s, at(time.Second), later)
		require.Equal(t, 2, semaphore(t, s, "a").Limit, "the delayed enqueue declared To 2")
		_, _, err := s.Promote(ctx, engine.At(at(time.Minute)), 10)
		require.NoError(t, err)
		j := state(t, s, raised[0])
		require.Equal(t, engine.StateReady, j.State, "the second slot of To 2")
		require.True(t, j.HoldsSlot)
		require.Equal(t, 2, semaphore(t, s, "a").Held)
	})
}

// A job that comes back to a key with no limit declared — its semaphore row
// was deleted meanwhile, or its enqueue (by an older version, delayed)
// declared none — takes its slot under its own To and declares it: the
// best declaration there is.
func TestAJobComingBackToAKeyWithNoLimitDeclaresItsOwn(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		later := slotted("a", 2)
		later.RunAt = at(time.Minute)
		got := enqueue(t, s, t0, later)
		_, err := s.DB().Exec(ctx, "DELETE FROM sluice_semaphores")
		require.NoError(t, err)
		_, _, err = s.Promote(ctx, engine.At(at(time.Minute)), 10)
		require.NoError(t, err)
		j := state(t, s, got[0])
		require.Equal(t, engine.StateReady, j.State)
		require.True(t, j.HoldsSlot)
		sem := semaphore(t, s, "a")
		require.Equal(t, 2, sem.Limit)
		require.Equal(t, 1, sem.Held)
		require.Equal(t, (3 * time.Minute).Microseconds(), sem.DurationUS)
	})
}
