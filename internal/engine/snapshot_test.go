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
		lim := limits{"k": spec(t, "k", 6, time.Minute, 6)} // one a minute, six at once
		r := claimAcrossASnapshot(t, s, open, lim, lim)
		if r.took == nil {
			// One writer (SQLite): no snapshot, and the other claim comes
			// after this one.
			require.Equal(t, r.mine, ids(r.res.Jobs))
			require.Empty(t, r.theirClaim().Jobs)
			return
		}
		require.Equal(t, r.theirs, ids(r.took.Jobs))
		require.Equal(t, r.mine[:2], ids(r.res.Jobs), "two were left")
		require.Len(t, r.res.Deferred, 3)
		for _, id := range r.mine[2:] {
			require.Equal(t, engine.StateScheduled, state(t, s, id).State)
		}
		for _, id := range r.mine[:2] {
			require.Equal(t, engine.StateRunning, state(t, s, id).State)
		}
		for _, d := range r.res.Deferred {
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
		lim := limits{"k": spec(t, "k", 6, time.Minute, 6)}
		lowered := limits{"k": spec(t, "k", 3, time.Minute, 3)}
		r := claimAcrossASnapshot(t, s, open, lim, lowered)
		if r.took == nil {
			// One writer (SQLite): no snapshot; the lowered limit's claim
			// comes after this one, and finds the budget spent.
			require.Equal(t, r.mine, ids(r.res.Jobs))
			require.Empty(t, r.theirClaim().Jobs)
			return
		}
		require.Equal(t, r.theirs[:2], ids(r.took.Jobs), "the lowered limit admits two more")
		require.Equal(t, r.mine[:3], ids(r.res.Jobs), "three were left")
		require.Len(t, r.res.Deferred, 2)
		running := 0
		for _, id := range slices.Concat(r.first, r.mine, r.theirs) {
			if state(t, s, id).State == engine.StateRunning {
				running++
			}
		}
		require.Equal(t, 6, running, "the minute holds 6, the claim's limit")
	})
}

// snapshotRace is a claim on a snapshot of budget k/a and another claim
// that takes from k/a between its snapshot and its lock.
type snapshotRace struct {
	// res is the claim of the jobs of queue "mine"; took the other's, of
	// queue "theirs", nil where there is no snapshot (SQLite).
	res, took *engine.ClaimResult
	// first is the job admitted before, which created k/a's row.
	first, mine, theirs []int64
	// theirClaim makes the other claim.
	theirClaim func() *engine.ClaimResult
}

// claimAcrossASnapshot admits one job under lim, enqueues 5 jobs of queue
// "mine" and 3 of queue "theirs" on k/a, and claims mine on a snapshot of
// k/a under lim; where the claim reads a snapshot, a claim of theirs under
// theirLim, on another pool, runs just before its lock.
func claimAcrossASnapshot(t *testing.T, s *engine.Store, open func() *engine.Store, lim, theirLim limits) snapshotRace {
	t.Helper()
	pid := register(t, s, t0)
	job := func(queue string) engine.NewJob {
		j := limited("k", "k/a")
		j.Queue = queue
		return j
	}
	var r snapshotRace
	r.first = enqueue(t, s, t0, job("first"))
	require.Len(t, claimLimited(t, s, pid, t0, 1, lim, 0, "first").Jobs, 1) // the row exists
	r.mine = enqueue(t, s, t0, job("mine"), job("mine"), job("mine"), job("mine"), job("mine"))
	r.theirs = enqueue(t, s, t0, job("theirs"), job("theirs"), job("theirs"))

	other := open()
	r.theirClaim = func() *engine.ClaimResult { return claimLimited(t, other, pid, t0, 3, theirLim, 0, "theirs") }
	read, _ := s.SQL().ReadBudgets([]string{"k/a"})
	lock, _ := s.SQL().LockBudgets([]string{"k/a"})
	rs, rec := testdb.Record(s)
	snapshot := false
	rec.Before = func(q string) {
		snapshot = snapshot || q == read && read != lock // SQLite spells both alike
		if snapshot && q == lock && r.took == nil {
			r.took = r.theirClaim()
		}
	}
	var err error
	r.res, err = rs.Claim(context.Background(), engine.ClaimParams{ProcessID: pid, Queues: []string{"mine"}, Max: 5,
		Clock: engine.At(t0), Limits: lim, BudgetHint: []string{"k/a"}, SnapshotHint: true})
	require.NoError(t, err)
	require.Equal(t, s.Dialect().Capabilities().RowLocks, r.took != nil, "a snapshot where rows are locked one by one")
	return r
}
