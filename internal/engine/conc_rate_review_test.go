package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// concLimited is a job of kind k on budget key that holds a concurrency
// slot of conc, whose kind declared To: to when it was enqueued.
func concLimited(key, conc string, to int) engine.NewJob {
	j := limited("k", key)
	j.Conc = &engine.Conc{Key: conc, To: to, Duration: 3 * time.Minute}
	return j
}

// docs/concurrency.md: "Lowering To (a deploy that declares fewer) takes
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
func TestReviewARateDeferredJobComingBackDoesNotRaiseALoweredConcurrencyLimit(t *testing.T) {
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

// A probe of docs/concurrency.md, "With rate limits": "The concurrency
// limit acts when a job becomes ready; the rate limit when a worker claims
// it. A job over the rate gives its slot back while it waits". A job that
// comes back for its rate-limit slot to find its key's slot taken (the job
// its slot went to still runs) is blocked, in the claim that promotes it,
// and spends nothing of its budget; once the slot comes back it runs,
// charged once. (It passes.)
func TestReviewAJobBlockedOnItsSlotSpendsNoRateBudget(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, 10*time.Second, 1), "o": spec(t, "o", 1, 10*time.Second, 1)}
		// J1 spends k/a; J2 (slot on c) is deferred and gives its slot
		// back, which J3 (another budget, blocked until then) takes.
		j1 := enqueue(t, s, t0, limited("k", "k/a"))[0]
		j2 := enqueue(t, s, t0, concLimited("k/a", "c", 1))[0]
		j3 := enqueue(t, s, t0, concLimited("o/b", "c", 1))[0]
		require.Equal(t, engine.StateBlocked, state(t, s, j3).State)
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 5, lim, engine.DefaultHorizon)
		require.Equal(t, []int64{j1}, ids(res.Jobs))
		require.Equal(t, engine.StateScheduled, state(t, s, j2).State)
		require.Equal(t, engine.StateReady, state(t, s, j3).State, "J2's slot went to J3")
		require.Equal(t, []int64{j3}, ids(claimLimited(t, s, pid, at(time.Second), 5, lim, engine.DefaultHorizon).Jobs))

		// J2's slot on k/a comes while J3 runs: it is blocked, uncharged.
		before := budgetsByName(t, s)["k/a"]
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 5, Clock: engine.At(at(10 * time.Second)),
			Limits: lim, PromoteDue: true})
		require.NoError(t, err)
		require.Empty(t, res.Jobs)
		require.Equal(t, engine.StateBlocked, state(t, s, j2).State)
		require.Equal(t, before.TAT, budgetsByName(t, s)["k/a"].TAT, "a blocked job spends nothing")

		require.NoError(t, s.Finish(ctx, pid, engine.At(at(11*time.Second)), engine.Outcomes{Completed: []int64{j3}, SlotHolders: []int64{j3}}))
		require.Equal(t, engine.StateReady, state(t, s, j2).State)
		res = claimLimited(t, s, pid, at(11*time.Second), 5, lim, engine.DefaultHorizon)
		require.Equal(t, []int64{j2}, ids(res.Jobs), "the budget admits it: nothing was spent while it was blocked")
		require.Equal(t, engine.Nanos(at(21*time.Second)), budgetsByName(t, s)["k/a"].TAT, "charged once")
	})
}
