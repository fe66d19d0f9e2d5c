package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A probe of docs/concurrency.md, "With rate limits": "The concurrency
// limit acts when a job becomes ready; the rate limit when a worker claims
// it. A job over the rate gives its slot back while it waits". A job that
// comes back for its rate-limit slot to find its key's slot taken (the job
// its slot went to still runs) is blocked, in the claim that promotes it,
// and spends nothing of its budget; once the slot comes back it runs,
// charged once.
func TestAJobBlockedOnItsSlotSpendsNoRateBudget(t *testing.T) {
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

		require.NoError(t, s.Finish(ctx, pid, engine.At(at(11*time.Second)), engine.Outcomes{Completed: []engine.Run{{ID: j3, Claim: 1}}, SlotHolders: []engine.Run{{ID: j3, Claim: 1}}}))
		require.Equal(t, engine.StateReady, state(t, s, j2).State)
		res = claimLimited(t, s, pid, at(11*time.Second), 5, lim, engine.DefaultHorizon)
		require.Equal(t, []int64{j2}, ids(res.Jobs), "the budget admits it: nothing was spent while it was blocked")
		require.Equal(t, engine.Nanos(at(21*time.Second)), budgetsByName(t, s)["k/a"].TAT, "charged once")
	})
}
