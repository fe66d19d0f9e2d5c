package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A claim that has unlimited jobs to take does not wait for a budget
// another transaction holds: it takes them, leaves the limited jobs that
// need that budget ready, undecided, and the next claim decides them. Its
// hint is locked without waiting too. Where a transaction holds the only
// write lock (SQLite) no other can hold a budget, and the claim decides
// every candidate.
func TestAClaimWithUnlimitedJobsLeavesTheJobsOfAHeldBudgetReady(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 10, time.Second, 10)}
		pid := register(t, s, t0)
		enqueue(t, s, t0, limited("k", "k/a"))
		require.Len(t, claimLimited(t, s, pid, t0, 1, lim, 0).Jobs, 1) // the row exists
		waiting := enqueue(t, s, t0, limited("k", "k/a"), limited("k", "k/a"), limited("k", "k/b"))
		plain := enqueue(t, s, t0, job("plain", "default", 0), job("plain", "default", 0))

		// Another transaction holds k/a, as a claim deciding it would.
		q, args := s.SQL().LockBudgets([]string{"k/a"})
		hold, held := holdLocked(t, open(), q, args)
		// A claim that waits for the lock gets it after a while, and then
		// fails the assertions below instead of hanging the test.
		release := sync.OnceFunc(hold)
		defer time.AfterFunc(10*time.Second, release).Stop()
		if !held {
			res := claimLimited(t, s, pid, t0, 10, lim, 0)
			require.ElementsMatch(t, append(waiting, plain...), ids(res.Jobs))
			require.Zero(t, res.Yielded)
			return
		}
		for _, hint := range [][]string{nil, {"k/a"}} {
			res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 10,
				Clock: engine.At(t0), Limits: lim, BudgetHint: hint})
			require.NoError(t, err, "hint %q", hint)
			if hint == nil {
				// k/b has no row yet: the claim creates it.
				require.ElementsMatch(t, append(waiting[2:], plain...), ids(res.Jobs))
				require.Equal(t, 2, res.Yielded)
				require.Equal(t, at(time.Second).UnixNano(), budgetNamed(t, s, "k/b").TAT)
			} else {
				require.ElementsMatch(t, plain, ids(res.Jobs))
				require.Equal(t, 2, res.Yielded)
			}
			require.Empty(t, res.Deferred)
			for _, id := range waiting[:2] {
				require.Equal(t, engine.StateReady, state(t, s, id).State)
			}
			if hint == nil {
				plain = enqueue(t, s, t0, job("plain", "default", 0))
			}
		}
		release()

		// Released: the next claim decides them, and charges the budget.
		res := claimLimited(t, s, pid, t0, 10, lim, 0)
		require.Equal(t, waiting[:2], ids(res.Jobs))
		require.Zero(t, res.Yielded)
		require.Equal(t, at(3*time.Second).UnixNano(), budgetNamed(t, s, "k/a").TAT, "three charged at t0")
	})
}

// A claim with no unlimited job waits for the budgets it needs, as before:
// yielding would leave it nothing to take.
func TestAClaimOfLimitedJobsOnlyDecidesThemAll(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"k": spec(t, "k", 10, time.Second, 10)}
		pid := register(t, s, t0)
		mine := enqueue(t, s, t0, limited("k", "k/a"), limited("k", "k/b"))
		res := claimLimited(t, s, pid, t0, 10, lim, 0)
		require.Equal(t, mine, ids(res.Jobs), "the rows are created in the claim")
		require.Zero(t, res.Yielded)
	})
}
