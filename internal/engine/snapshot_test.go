package engine_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A claim hinted with budgets that admit every candidate marks its jobs
// running before it locks them, where claims lock budgets row by row
// (PostgreSQL, MySQL): another claim on those budgets waits only for the
// decision, the budgets' write and the commit. It charges the budgets as
// any claim does.
func TestAClaimOnLooseBudgetsMarksItsJobsBeforeLockingThem(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"k": spec(t, "k", 10, time.Second, 10)} // one a second, ten at once
		pid := register(t, s, t0)
		enqueue(t, s, t0, limited("k", "k/a"))
		require.Len(t, claimLimited(t, s, pid, t0, 1, lim, 0).Jobs, 1) // the row exists
		mine := enqueue(t, s, t0, limited("k", "k/a"), limited("k", "k/a"), limited("k", "k/a"))

		rs, rec := testdb.Record(s)
		res, err := rs.Claim(context.Background(), engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 5,
			Clock: engine.At(t0), Limits: lim, BudgetHint: []string{"k/a"}, SnapshotHint: true})
		require.NoError(t, err)
		require.Equal(t, mine, ids(res.Jobs))
		seen := rec.Take()
		read, _ := s.SQL().ReadBudgets([]string{"k/a"})
		lock, _ := s.SQL().LockBudgets([]string{"k/a"})
		mark, _ := s.SQL().MarkRunning(mine, pid, 0)
		if s.Dialect().Capabilities().RowLocks {
			require.Contains(t, seen, read, "the hint read as a snapshot")
			require.Less(t, slices.Index(seen, read), slices.Index(seen, mark), "%q", seen)
			require.Less(t, slices.Index(seen, mark), slices.Index(seen, lock), "marked before the lock: %q", seen)
		} else {
			// One writer (SQLite): reading is locking, and the claim marks
			// its jobs after deciding.
			require.Less(t, slices.Index(seen, lock), slices.Index(seen, mark), "%q", seen)
		}
		for _, j := range res.Jobs {
			require.Equal(t, engine.StateRunning, state(t, s, j.ID).State)
		}
		// Four charged at t0: the budget's debt is four intervals.
		require.Equal(t, at(4*time.Second).UnixNano(), budgetNamed(t, s, "k/a").TAT)
	})
}

// When another claim takes from a budget between a claim's snapshot of it
// and its lock, the claim decides again on what is left, and takes no more
// than the limit allows: here 5 were left, the other claim took 3 of them,
// and of its 5 jobs the claim took 2 and deferred 3.
func TestAClaimDecidesAgainWhenAnotherTookItsBudgetAfterItsSnapshot(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 6, time.Minute, 6)} // one a minute, six at once
		pid := register(t, s, t0)
		job := func(queue string) engine.NewJob {
			j := limited("k", "k/a")
			j.Queue = queue
			return j
		}
		enqueue(t, s, t0, job("first"))
		require.Len(t, claimLimited(t, s, pid, t0, 1, lim, 0, "first").Jobs, 1) // the row exists; 5 left
		mine := enqueue(t, s, t0, job("mine"), job("mine"), job("mine"), job("mine"), job("mine"))
		theirs := enqueue(t, s, t0, job("theirs"), job("theirs"), job("theirs"))

		other := open()
		read, _ := s.SQL().ReadBudgets([]string{"k/a"})
		lock, _ := s.SQL().LockBudgets([]string{"k/a"})
		var took *engine.ClaimResult
		rs, rec := testdb.Record(s)
		snapshot := false
		rec.Before = func(q string) {
			snapshot = snapshot || q == read && read != lock // SQLite spells both alike
			if snapshot && q == lock && took == nil {
				took = claimLimited(t, other, pid, t0, 3, lim, 0, "theirs")
			}
		}
		res, err := rs.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"mine"}, Max: 5,
			Clock: engine.At(t0), Limits: lim, BudgetHint: []string{"k/a"}, SnapshotHint: true})
		require.NoError(t, err)
		if took == nil {
			// One writer (SQLite): no snapshot, and the other claim comes
			// after this one.
			require.False(t, s.Dialect().Capabilities().RowLocks)
			took = claimLimited(t, other, pid, t0, 3, lim, 0, "theirs")
			require.Equal(t, mine, ids(res.Jobs))
			require.Empty(t, took.Jobs)
			return
		}
		require.Equal(t, theirs, ids(took.Jobs))
		require.Equal(t, mine[:2], ids(res.Jobs), "two were left")
		require.Len(t, res.Deferred, 3)
		for _, id := range mine[2:] {
			require.Equal(t, engine.StateScheduled, state(t, s, id).State)
		}
		for _, id := range mine[:2] {
			require.Equal(t, engine.StateRunning, state(t, s, id).State)
		}
		for _, d := range res.Deferred {
			require.True(t, d.Until.After(t0), "deferred to a later slot: %+v", d)
		}
	})
}

// When a claim under a lowered limit (a deploy half rolled out) takes from
// a budget between another claim's snapshot of it and its lock, the
// snapshot's decision does not stand: the claim decides again on what is
// left, and the minute holds no more than its own limit allows. Both
// limits have the interval of one a minute (To − Burst + 1 = 1): "6, 6 at
// once" had admitted 1 and its snapshot admits the 5 left, but "3, 3 at
// once" takes 2 in between (a tighter limit starts from the budget as
// left), so the claim takes 3 and defers 2.
func TestAClaimDecidesAgainWhenALoweredLimitTookItsBudgetAfterItsSnapshot(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 6, time.Minute, 6)}
		lowered := limits{"k": spec(t, "k", 3, time.Minute, 3)}
		pid := register(t, s, t0)
		job := func(queue string) engine.NewJob {
			j := limited("k", "k/a")
			j.Queue = queue
			return j
		}
		first := enqueue(t, s, t0, job("first"))
		require.Len(t, claimLimited(t, s, pid, t0, 1, lim, 0, "first").Jobs, 1) // the row exists
		mine := enqueue(t, s, t0, job("mine"), job("mine"), job("mine"), job("mine"), job("mine"))
		theirs := enqueue(t, s, t0, job("theirs"), job("theirs"), job("theirs"))

		other := open()
		read, _ := s.SQL().ReadBudgets([]string{"k/a"})
		lock, _ := s.SQL().LockBudgets([]string{"k/a"})
		var took *engine.ClaimResult
		rs, rec := testdb.Record(s)
		snapshot := false
		rec.Before = func(q string) {
			snapshot = snapshot || q == read && read != lock // SQLite spells both alike
			if snapshot && q == lock && took == nil {
				took = claimLimited(t, other, pid, t0, 3, lowered, 0, "theirs")
			}
		}
		res, err := rs.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"mine"}, Max: 5,
			Clock: engine.At(t0), Limits: lim, BudgetHint: []string{"k/a"}, SnapshotHint: true})
		require.NoError(t, err)
		if took == nil {
			// One writer (SQLite): no snapshot; the lowered limit's claim
			// comes after this one, and finds the budget spent.
			require.False(t, s.Dialect().Capabilities().RowLocks)
			require.Equal(t, mine, ids(res.Jobs))
			took = claimLimited(t, other, pid, t0, 3, lowered, 0, "theirs")
			require.Empty(t, took.Jobs)
			return
		}
		require.Equal(t, theirs[:2], ids(took.Jobs), "the lowered limit admits two more")
		require.Equal(t, mine[:3], ids(res.Jobs), "three were left")
		require.Len(t, res.Deferred, 2)
		running := 0
		for _, id := range slices.Concat(first, mine, theirs) {
			if state(t, s, id).State == engine.StateRunning {
				running++
			}
		}
		require.Equal(t, 6, running, "the minute holds 6, the claim's limit")
	})
}
