package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// budgetListed reads one budget as `sluice budgets` lists it.
func budgetListed(t *testing.T, s *engine.Store, key string) engine.BudgetInfo {
	t.Helper()
	bs, err := s.ListBudgets(context.Background())
	require.NoError(t, err)
	for _, b := range bs {
		if b.Name == key {
			return b
		}
	}
	t.Fatalf("no budget %s", key)
	return engine.BudgetInfo{}
}

// `sluice budgets` (docs/operations.md: "budgets: [{key, limit, …,
// waiting, parked, …}]"), the dashboard's budgets page ("jobs waiting and
// parked") and explain ("N job(s) parked on it") show the budget row's
// parked count as the jobs parked on it. An operator cancels every parked
// job of a budget (1 per hour): the budget still reports them parked —
// waiting 0, parked 8 — and the dispatcher's Unpark a minute later leaves
// the phantom count, which only the budget's next slot, an hour on,
// corrected. The cancel takes each job off the count in its own
// transaction.
func TestCancellingParkedJobsLeavesNoPhantomParkedCount(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		_, parked := parkOnKX(t, s, time.Hour, 9)
		require.Len(t, parked, 8)
		require.Equal(t, 8, budgetListed(t, s, "k/x").Parked)

		moved, err := s.CancelJobs(ctx, engine.At(at(time.Second)), parked, "")
		require.NoError(t, err)
		require.Len(t, moved, 8)
		_, err = s.Unpark(ctx, engine.At(at(time.Minute)), 5*time.Minute, 100, 0)
		require.NoError(t, err)

		b := budgetListed(t, s, "k/x")
		require.Zero(t, b.Waiting, "no job waits on the budget")
		require.Zero(t, b.Parked, "every parked job was cancelled, yet the budget still lists %d parked (waiting %d)", b.Parked, b.Waiting)
	})
}

// parkOnKX enqueues n jobs on budget k/x, limited to 1 per per, and
// claims them at t0 with a 5-minute horizon: one is admitted, the next
// get slots and the rest park. It returns the jobs and those parked.
func parkOnKX(t *testing.T, s *engine.Store, per time.Duration, n int) (ids, parked []int64) {
	t.Helper()
	jobs := make([]engine.NewJob, n)
	for i := range jobs {
		jobs[i] = limited("k", "k/x")
	}
	ids = enqueue(t, s, t0, jobs...)
	res := claimLimited(t, s, register(t, s, t0), t0, 20, limits{"k": spec(t, "k", 1, per, 1)}, 5*time.Minute)
	require.Len(t, res.Jobs, 1)
	for _, d := range res.Deferred {
		if d.Parked {
			parked = append(parked, d.JobID)
		}
	}
	return ids, parked
}

// parkedOn counts the jobs of ids parked on a budget, as they are.
func parkedOn(t *testing.T, s *engine.Store, key string, ids []int64) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		j, err := s.GetJob(context.Background(), id)
		require.NoError(t, err)
		if j.State == engine.StateParked && j.WaitKey == key {
			n++
		}
	}
	return n
}

// The same for an operator's retry, which makes a parked job ready, and
// for a mix of moves: after each, the budget counts exactly the jobs
// still parked on it, and those it counts still get their slots as the
// horizon reaches them (the count is what brings the dispatcher back to
// the budget, so it must never fall behind them).
func TestOperatorMovesOfParkedJobsKeepTheBudgetsParkedCountExact(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		ids, parked := parkOnKX(t, s, time.Minute, 20)
		require.Greater(t, len(parked), 5)
		check := func(what string) {
			t.Helper()
			b := budgetListed(t, s, "k/x")
			require.Equal(t, parkedOn(t, s, "k/x", ids), b.Parked, "%s: the budget counts the jobs parked on it", what)
		}
		check("after the claim")

		moved, err := s.RetryJobs(ctx, engine.At(at(time.Second)), parked[:2])
		require.NoError(t, err)
		require.Len(t, moved, 2)
		require.Equal(t, engine.StateReady, moved[0].State)
		check("after retrying two")

		// Retried again, or cancelled once they are not parked: the count
		// is not lowered twice.
		_, err = s.RetryJobs(ctx, engine.At(at(time.Second)), parked[:1])
		require.NoError(t, err)
		_, err = s.CancelJobs(ctx, engine.At(at(time.Second)), parked[1:3], "")
		require.NoError(t, err)
		check("after a retry of a ready job and two cancels")

		// The rest get their slots, a minute apart, as the horizon
		// reaches them.
		left := parkedOn(t, s, "k/x", ids)
		require.Positive(t, left)
		for m := 1; m <= 30 && parkedOn(t, s, "k/x", ids) > 0; m++ {
			_, err = s.Unpark(ctx, engine.At(at(time.Duration(m)*time.Minute)), 5*time.Minute, 100, 0)
			require.NoError(t, err)
			check("after an unpark")
		}
		require.Zero(t, parkedOn(t, s, "k/x", ids), "every job left parked got its slot")
	})
}
