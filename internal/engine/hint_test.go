package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A claim whose BudgetHint missed a budget that sorts before one the hint
// locked takes that budget at once when no one holds it, instead of
// starting again. When another transaction holds it, the claim starts
// again without the hint and waits for it in key order, as any claim does.
// Either way it decides on the budgets' latest state.
func TestAClaimTakesAFreeBudgetItsHintMissedWithoutStartingAgain(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 10, time.Minute, 10)} // one a minute, ten at once
		pid := register(t, s, t0)
		rs, rec := testdb.Record(s)
		lockReady, _ := s.SQL().LockReady("default", true, 2)
		claimHinted := func() (*engine.ClaimResult, error) {
			return rs.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 2, Clock: engine.At(t0),
				Limits: lim, BudgetHint: []string{"k/b"}})
		}
		charged := func(n int) {
			t.Helper()
			for _, k := range []string{"k/a", "k/b"} {
				require.Equal(t, at(time.Duration(n)*time.Minute).UnixNano(), budgetNamed(t, s, k).TAT, "%s charged %d times", k, n)
			}
		}

		// Both rows exist.
		enqueue(t, s, t0, limited("k", "k/a"), limited("k", "k/b"))
		require.Len(t, claimLimited(t, s, pid, t0, 2, lim, 0).Jobs, 2)
		charged(1)

		enqueue(t, s, t0, limited("k", "k/a"), limited("k", "k/b"))
		res, err := claimHinted()
		require.NoError(t, err)
		require.Len(t, res.Jobs, 2)
		require.Equal(t, []string{"k/a", "k/b"}, res.Budgets)
		require.Equal(t, 1, rec.Count(lockReady), "the candidates were locked once: the claim did not start again")
		charged(2)

		other := open()
		q, args := other.SQL().LockBudgets([]string{"k/a"})
		release, held := holdLocked(t, other, q, args)
		if !held {
			return // SQLite: one writer, so no budget is ever held while a claim runs
		}
		rec.Take()
		enqueue(t, s, t0, limited("k", "k/a"), limited("k", "k/b"))
		type result struct {
			res *engine.ClaimResult
			err error
		}
		done := make(chan result, 1)
		go func() {
			res, err := claimHinted()
			done <- result{res, err}
		}()
		// k/a was held when the claim looked for it: it started again and
		// now waits for k/a, in key order.
		require.Eventually(t, func() bool { return rec.Count(lockReady) == 2 }, 30*time.Second, time.Millisecond)
		release()
		got := <-done
		require.NoError(t, got.err)
		require.Len(t, got.res.Jobs, 2)
		charged(3)
	})
}
