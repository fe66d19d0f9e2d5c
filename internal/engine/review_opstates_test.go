package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// reviewBudgetInfo reads one budget as `sluice budgets` lists it.
func reviewBudgetInfo(t *testing.T, s *engine.Store, key string) engine.BudgetInfo {
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
// corrects.
func TestReviewCancellingParkedJobsLeavesNoPhantomParkedCount(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Hour, 1)}
		jobs := make([]engine.NewJob, 9)
		for i := range jobs {
			jobs[i] = limited("k", "k/x")
		}
		enqueue(t, s, t0, jobs...)
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 20, lim, 5*time.Minute)
		require.Len(t, res.Jobs, 1)
		var parked []int64
		for _, d := range res.Deferred {
			if d.Parked {
				parked = append(parked, d.JobID)
			}
		}
		require.Len(t, parked, 8)
		require.Equal(t, 8, reviewBudgetInfo(t, s, "k/x").Parked)

		moved, err := s.CancelJobs(ctx, engine.At(at(time.Second)), parked, "")
		require.NoError(t, err)
		require.Len(t, moved, 8)
		_, err = s.Unpark(ctx, engine.At(at(time.Minute)), 5*time.Minute, 100, 0)
		require.NoError(t, err)

		b := reviewBudgetInfo(t, s, "k/x")
		require.Zero(t, b.Waiting, "no job waits on the budget")
		require.Zero(t, b.Parked, "every parked job was cancelled, yet the budget still lists %d parked (waiting %d)", b.Parked, b.Waiting)
	})
}
