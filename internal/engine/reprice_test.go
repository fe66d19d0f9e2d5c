package engine_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/ratelimit"
)

// parkOnePerBudget enqueues two jobs on each key under a limit of one an
// hour and claims them at t0: each budget admits one and parks the other
// (its slot would be an hour ahead, past the horizon).
func parkOnePerBudget(t *testing.T, s *engine.Store, keys ...string) limits {
	t.Helper()
	lim := limits{}
	var jobs []engine.NewJob
	for _, k := range keys {
		scope := ratelimit.ScopeOf(k)
		lim[scope] = spec(t, scope, 1, time.Hour, 1)
		jobs = append(jobs, limited(scope, k), limited(scope, k))
	}
	enqueue(t, s, t0, jobs...)
	res := claimLimited(t, s, register(t, s, t0), t0, len(jobs), lim, 5*time.Minute)
	require.Len(t, res.Jobs, len(keys))
	return lim
}

// budgetsByName returns the stored budgets by key.
func budgetsByName(t *testing.T, s *engine.Store) map[string]engine.BudgetInfo {
	t.Helper()
	bs, err := s.ListBudgets(context.Background())
	require.NoError(t, err)
	out := map[string]engine.BudgetInfo{}
	for _, b := range bs {
		out[b.Name] = b
	}
	return out
}

// Reprice hands a looser limit to the parked budgets of a scope — the bare
// scope and SCOPE/…, not the budgets of scopes that merely start alike —
// in transactions of Batch budgets, leaving out those with a limit of their
// own: each is charged under the new limit, its debt capped at Burst new
// intervals and its slot cursor brought back to the horizon, so that the
// dispatcher hands its parked job a slot at once. A second call changes
// nothing.
func TestRepriceBringsALooserLimitToTheParkedBudgetsOfAScope(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		inScope := []string{"k", "k/a", "k/b", "k/c", "k/d"}
		others := []string{"k/own", "k-x/a", "kx/a"}
		parkOnePerBudget(t, s, append(inScope, others...)...)
		before := budgetsByName(t, s)

		now := at(time.Minute)
		looser := spec(t, "k", 1, time.Second, 1).Params
		rs, rec := testdb.Record(s)
		n, err := rs.Reprice(ctx, engine.At(now), engine.Repricing{Target: "k", Params: looser, Except: []string{"k/own"}, Batch: 2})
		require.NoError(t, err)
		require.Equal(t, len(inScope), n)
		locks := 0
		for _, q := range rec.Take() {
			if strings.Contains(q, "interval_ns <>") {
				locks++
			}
		}
		require.Equal(t, 4, locks, "6 budgets of the scope to lock, 2 a transaction, and one that finds none")

		after := budgetsByName(t, s)
		for _, k := range inScope {
			b := after[k]
			require.Equal(t, time.Second.Nanoseconds(), b.IntervalNS, k)
			require.Equal(t, engine.Nanos(now.Add(engine.DefaultHorizon)), b.NextSlot, "%s: the cursor at the horizon", k)
			require.LessOrEqual(t, b.TAT, engine.Nanos(now.Add(time.Second)), "%s: the debt capped at one new interval", k)
			require.Equal(t, 1, b.Parked, k)
		}
		for _, k := range others {
			require.Equal(t, before[k].BudgetRow, after[k].BudgetRow, "%s is not the scope's, or has a limit of its own", k)
		}

		n, err = s.Reprice(ctx, engine.At(now), engine.Repricing{Target: "k", Params: looser, Except: []string{"k/own"}})
		require.NoError(t, err)
		require.Zero(t, n, "already charged under the limit")

		moved, err := s.Unpark(ctx, engine.At(now), engine.DefaultHorizon, 100, 100)
		require.NoError(t, err)
		require.Equal(t, len(inScope), moved, "each repriced budget's parked job gets a slot at the horizon")
	})
}

// A target that names one budget changes that budget only, not the keys
// that extend it.
func TestRepriceOfOneBudgetChangesThatBudgetOnly(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		parkOnePerBudget(t, s, "k/own", "k/own/x", "k/other")
		before := budgetsByName(t, s)
		n, err := s.Reprice(ctx, engine.At(at(time.Minute)), engine.Repricing{Target: "k/own", Params: spec(t, "k", 1, 10*time.Second, 1).Params})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		after := budgetsByName(t, s)
		require.Equal(t, (10 * time.Second).Nanoseconds(), after["k/own"].IntervalNS)
		require.Equal(t, before["k/own/x"].BudgetRow, after["k/own/x"].BudgetRow)
		require.Equal(t, before["k/other"].BudgetRow, after["k/other"].BudgetRow)
	})
}

// A tighter limit is recorded on the budget, which counts its debt in the
// new intervals and keeps its slot cursor; a pause keeps both as the old
// limit left them.
func TestRepriceOfATighterLimitCountsTheDebtAndAPauseKeepsIt(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		parkOnePerBudget(t, s, "tight/a", "paused/a")
		before := budgetsByName(t, s)
		now := engine.At(at(time.Minute))
		tighter := spec(t, "tight", 1, 2*time.Hour, 1).Params
		paused := spec(t, "paused", 0, time.Hour, 1).Params
		for _, r := range []engine.Repricing{{Target: "tight", Params: tighter}, {Target: "paused", Params: paused}} {
			n, err := s.Reprice(ctx, now, r)
			require.NoError(t, err)
			require.Equal(t, 1, n, r.Target)
			n, err = s.Reprice(ctx, now, r)
			require.NoError(t, err)
			require.Zero(t, n, "%s: already charged under the limit", r.Target)
		}
		after := budgetsByName(t, s)
		require.Equal(t, tighter, after["tight/a"].Params())
		require.Equal(t, paused, after["paused/a"].Params())
		// One admission of an hour at t0 is 59 minutes of debt a minute
		// later: 118 minutes of one every two hours.
		require.Equal(t, before["tight/a"].TAT, engine.Nanos(at(time.Hour)))
		require.Equal(t, engine.Nanos(at(time.Minute+118*time.Minute)), after["tight/a"].TAT)
		require.Equal(t, before["paused/a"].TAT, after["paused/a"].TAT)
		for _, k := range []string{"tight/a", "paused/a"} {
			require.Equal(t, before[k].NextSlot, after[k].NextSlot, k)
		}
	})
}

// A claim that meets a looser limit applies the same rules as Reprice: a
// new job on a budget whose backlog is parked an hour ahead gets a slot at
// the horizon, not after the old limit's hour, and the claim hands the
// parked job the slot after it.
func TestAClaimUnderALooserLimitBringsTheSlotCursorBackToTheHorizon(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		parkOnePerBudget(t, s, "k/a")
		require.Greater(t, budgetsByName(t, s)["k/a"].NextSlot, engine.Nanos(at(time.Hour-time.Second)), "parked an hour ahead")

		enqueue(t, s, t0, limited("k", "k/a"))
		now := at(time.Minute)
		looser := limits{"k": spec(t, "k", 1, time.Second, 1)}
		res := claimLimited(t, s, register(t, s, now), now, 10, looser, engine.DefaultHorizon)
		require.Len(t, res.Deferred, 1)
		require.Equal(t, now.Add(engine.DefaultHorizon), res.Deferred[0].Until, "the new job's slot is at the horizon")
		require.Equal(t, []time.Time{now.Add(engine.DefaultHorizon + time.Second)}, res.Unparked, "the parked job's slot follows it")
	})
}

// Two workers that start together reprice the same scope at once, each
// from its own pool, in small batches, meeting budgets the other holds
// locked: neither fails, and between them every budget is repriced
// exactly once (a budget the other has repriced is not read again).
func TestTwoRepricesAtOnceRepriceEachBudgetOnce(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		keys := make([]string, 12)
		for i := range keys {
			keys[i] = "k/" + string(rune('a'+i))
		}
		parkOnePerBudget(t, s, keys...)
		looser := spec(t, "k", 1, time.Second, 1).Params
		stores := []*engine.Store{s, open()}
		changed := make(chan int, len(stores))
		errs := make(chan error, len(stores))
		for _, st := range stores {
			go func() {
				n, err := st.Reprice(ctx, engine.At(at(time.Minute)), engine.Repricing{Target: "k", Params: looser, Batch: 2})
				changed <- n
				errs <- err
			}()
		}
		total := 0
		for range stores {
			total += <-changed
			require.NoError(t, <-errs)
		}
		require.Equal(t, len(keys), total, "each budget repriced once between the two")
		after := budgetsByName(t, s)
		for _, k := range keys {
			require.Equal(t, time.Second.Nanoseconds(), after[k].IntervalNS, k)
		}
	})
}

// count returns how many of stmts contain every one of parts.
func count(stmts []string, parts ...string) int {
	n := 0
	for _, q := range stmts {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(q, p)
		}
		if all {
			n++
		}
	}
	return n
}

// Reprice "works in transactions of at most Batch budgets, in key order"
// (reprice.go; LockRepriced: "in key order"), as every transaction that
// waits for budgets locks them: "the claim locks their budget rows (in key
// order, so overlapping limits never deadlock)" (docs/rate-limits.md).
//
// A claim holds k/a (the budget its last claim locked, its hint) and is
// about to lock k/b, which sorts after it. A worker's refresh reprices the
// scope k at that moment, and must wait for k/a without holding k/b: then
// the claim takes k/b, commits, and Reprice goes on. Each runs once, and
// neither is failed by a deadlock. The scope has a few thousand idle
// budgets besides the two with parked jobs, as a scope keyed by account
// does: MariaDB then reads LockRepriced through sluice_budgets_parked
// (parked, next_slot) and sorts the rows after locking them, so it locks
// k/b (1 parked) before k/a (2 parked), and the index entry before the
// row, which a claim that changes the row's parked count or slot cursor
// must also lock. Reprice now finds the budgets without locking them and
// locks them by name, in key order (ReadRepriced, then LockBudgets).
func TestRepriceLocksTheBudgetsOfAScopeInKeyOrderBesideAClaim(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		ctx := context.Background()
		old := limits{"k": spec(t, "k", 1, time.Hour, 1)}
		enqueue(t, s, t0, limited("k", "k/a"), limited("k", "k/a"), limited("k", "k/a"), limited("k", "k/b"), limited("k", "k/b"))
		pid := register(t, s, t0)
		require.Len(t, claimLimited(t, s, pid, t0, 10, old, engine.DefaultHorizon).Jobs, 2)
		bs := budgetsByName(t, s)
		require.Equal(t, 2, bs["k/a"].Parked)
		require.Equal(t, 1, bs["k/b"].Parked)
		var idle []string
		for i := range 3000 {
			idle = append(idle, fmt.Sprintf("k/x%05d", i))
		}
		q, args := s.SQL().InsertBudgets(idle)
		_, err := s.DB().Exec(ctx, q, args...)
		require.NoError(t, err)
		analyze := "ANALYZE"
		if s.Dialect().Name() == "mysql" {
			analyze = "ANALYZE TABLE sluice_budgets"
		}
		rows, err := s.DB().Query(ctx, analyze)
		require.NoError(t, err)
		for rows.Next() {
		}
		rows.Close()

		now := at(time.Minute)
		both := job("k", "default", 0)
		both.RateKeys = []engine.RateKey{{Key: "k/a", Cost: 1}, {Key: "k/b", Cost: 1}}
		enqueue(t, s, now, both)
		looser := limits{"k": spec(t, "k", 1, time.Second, 1)}

		rs, recR := testdb.Record(open())
		rc, recC := testdb.Record(open())
		var wg sync.WaitGroup
		var repriceErr error
		repriced := -1
		armed := true
		recC.Before = func(q string) {
			if !armed || !strings.Contains(q, "FROM sluice_budgets WHERE name") || !strings.Contains(q, "FOR UPDATE") || strings.Contains(q, "SKIP LOCKED") {
				return
			}
			// The claim holds k/a and is about to lock k/b: the refresh
			// reprices k now, and the claim goes on once it waits.
			armed = false
			wg.Add(1)
			go func() {
				defer wg.Done()
				repriced, repriceErr = rs.Reprice(ctx, engine.At(now), engine.Repricing{Target: "k", Params: looser["k"].Params})
			}()
			// Reprice's lock of its budgets waits for k/a: the only
			// statement of this test's database that can wait for a
			// budget, as the claim, held here, runs nothing meanwhile.
			testdb.WaitForLockWaits(t, s, 1, "sluice_budgets", "FROM sluice_budgets", "FOR UPDATE")
		}
		_, err = rc.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 5, Clock: engine.At(now),
			Limits: looser, BudgetHint: []string{"k/a"}})
		wg.Wait()
		require.False(t, armed, "the claim locked k/b after its hint")
		require.NoError(t, err)
		require.NoError(t, repriceErr)
		require.Zero(t, repriced, "the claim charged both budgets under the new limit while Reprice waited: it found them, locked them, and left them as they were")
		claims := count(recC.Take(), "sluice_budgets", "SKIP LOCKED")
		reprices := count(recR.Take(), "interval_ns <>")
		require.Equal(t, 1, claims, "the claim ran once: no deadlock failed it")
		require.Equal(t, 1, reprices, "Reprice ran once: no deadlock failed it")
	})
}
