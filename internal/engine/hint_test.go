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

// A claim's BudgetHint (k/b here) locks budgets with its candidates. The
// budgets it missed are taken without starting the claim again: those
// that sort after the hinted ones in key order, waiting for them if need
// be; those that sort before, at once if no one holds them (waiting for
// them out of order could deadlock), and only when another transaction
// holds one does the claim start again without the hint, to wait for it in
// order. Every way, it decides on the budgets' latest state.
func TestAClaimCompletesItsBudgetHintWithoutStartingAgain(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 10, time.Minute, 10)} // one a minute, ten at once
		keys := []string{"k/a", "k/b", "k/c"}
		pid := register(t, s, t0)
		rs, rec := testdb.Record(s)
		lockReady, _ := s.SQL().LockReady("default", true, len(keys))
		// The look for the budgets the hint missed, as it is spelled for
		// one key or two (MySQL spells out each).
		one, _ := s.SQL().LockFreeBudgets([]string{"k/a"})
		two, _ := s.SQL().LockFreeBudgets([]string{"k/a", "k/c"})
		lookedFree := func(q string) bool { return q == one || q == two }
		count := func(q string) int {
			n := 0
			for _, seen := range rec.Seen() {
				if seen == q {
					n++
				}
			}
			return n
		}
		enqueueAll := func() {
			for _, k := range keys {
				enqueue(t, s, t0, limited("k", k))
			}
		}
		charged := func(n int) {
			t.Helper()
			for _, k := range keys {
				require.Equal(t, at(time.Duration(n)*time.Minute).UnixNano(), budgetNamed(t, s, k).TAT, "%s charged %d times", k, n)
			}
		}
		// claim runs a claim hinted with k/b in the background, and when
		// held is given, releases it once the claim has run a statement
		// past its look for k/a without waiting.
		claim := func(held func()) {
			t.Helper()
			rec.Take()
			enqueueAll()
			done := make(chan error, 1)
			var res *engine.ClaimResult
			go func() {
				var err error
				res, err = rs.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: len(keys),
					Clock: engine.At(t0), Limits: lim, BudgetHint: []string{"k/b"}})
				done <- err
			}()
			if held != nil {
				require.Eventually(t, func() bool {
					// The hint is read without waiting too (yield.go):
					// the look for k/a is the second.
					seen := rec.Seen()
					i := slices.IndexFunc(seen, lookedFree)
					if i < 0 {
						return false
					}
					j := slices.IndexFunc(seen[i+1:], lookedFree)
					return j >= 0 && i+1+j < len(seen)-1
				}, 30*time.Second, time.Millisecond)
				held()
			}
			require.NoError(t, <-done)
			require.Len(t, res.Jobs, len(keys))
			require.Equal(t, keys, res.Budgets)
		}

		// The rows exist.
		enqueueAll()
		require.Len(t, claimLimited(t, s, pid, t0, len(keys), lim, 0).Jobs, len(keys))
		charged(1)

		claim(nil)
		require.Equal(t, 1, count(lockReady), "every budget was free: the candidates were locked once")
		charged(2)

		other := open()
		hold := func(k string) (func(), bool) {
			q, args := other.SQL().LockBudgets([]string{k})
			return holdLocked(t, other, q, args)
		}
		release, held := hold("k/c")
		if !held {
			return // SQLite: one writer, so no budget is ever held while a claim runs
		}
		claim(release)
		require.Equal(t, 1, count(lockReady), "k/c sorts after k/b: the claim locked it in order, waiting if need be, and did not start again")
		charged(3)

		release, _ = hold("k/a")
		claim(release)
		require.Equal(t, 2, count(lockReady), "k/a sorts before k/b and was held: the claim started again, to wait for it in order")
		charged(4)
	})
}

// A claim that takes no rate-limited job (its worker leaves them to a
// sweep) leaves its hint's budgets unlocked: its unlimited jobs do not wait
// for a budget that a sweep or another claim holds.
func TestAClaimThatTakesNoLimitedJobLeavesItsHintUnlocked(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		lim := limits{"k": spec(t, "k", 10, time.Minute, 10)}
		pid := register(t, s, t0)
		enqueue(t, s, t0, limited("k", "k/a"))
		require.Len(t, claimLimited(t, s, pid, t0, 1, lim, 0).Jobs, 1) // the row exists
		plain := enqueue(t, s, t0, job("a", "default", 0))
		waiting := enqueue(t, s, t0, limited("k", "k/a"))

		other := open()
		lockHint, args := other.SQL().LockBudgets([]string{"k/a"})
		release, _ := holdLocked(t, other, lockHint, args)
		defer release()
		// A claim that waited for k/a would fail here instead of hanging.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rs, rec := testdb.Record(s)
		res, err := rs.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 5, Candidates: -1,
			Clock: engine.At(t0), Limits: lim, BudgetHint: []string{"k/a"}})
		require.NoError(t, err)
		require.Equal(t, plain, ids(res.Jobs))
		require.Empty(t, res.Budgets)
		require.NotContains(t, rec.Take(), lockHint, "no budget locked")
		require.Equal(t, engine.StateReady, state(t, s, waiting[0]).State, "left for the sweep")
	})
}
