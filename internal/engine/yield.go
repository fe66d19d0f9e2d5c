package engine

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// A claim that takes unlimited jobs as well as rate-limited ones never
// waits for a budget another claim holds. Such a claim would hold its
// unlimited jobs back for as long as the other claim decides, writes and
// commits: with four worker processes meeting on a flood's budget, a light
// load of unlimited jobs had a p99 2–3 times its p99 without the flood.
// Instead the claim locks the budgets no one holds, creates the missing
// ones, and yields the candidates that need a held budget: it leaves them
// ready, undecided, for the claim after it (ClaimResult.Yielded), which
// its worker makes at once. The claim holding that budget is deciding it
// at that moment; and since the yielding claim waits for no lock, the
// order budgets are locked in does not matter to it. A claim on a
// snapshot (snapshot.go) waits for its budgets after marking its jobs
// running, as before: it holds them only to decide and write.

// yields says whether a claim yields the candidates whose budgets another
// claim holds: where claims wait for each other's rows, when some of its
// candidates carry no limit, and unless it decides on a snapshot (whose
// jobs are marked running before it locks the budgets, briefly).
func (s *Store) yields(res *ClaimResult, checks [][]check) bool {
	return s.d.Capabilities().RowLocks && !res.snapshot &&
		slices.ContainsFunc(checks, func(cs []check) bool { return len(cs) == 0 })
}

// lockUnheldBudgets locks the budgets of keys (sorted) that no other
// transaction holds, without waiting for any: the keys it returns no
// budget for are held. In one round trip it locks the ones the hint did
// not try (the hinted ones were tried with the candidates: res.hinted) and
// reads which of the rest exist, without a lock. It then creates the
// missing ones and locks them, as lockBudgets does; inserting a row that
// exists would wait for a claim that holds it, so only those are
// inserted. The time is read after the last lock, as lockBudgets reads it.
func (s *Store) lockUnheldBudgets(ctx context.Context, tx Tx, keys []string, p ClaimParams, res *ClaimResult) (map[string]*budget, time.Time, error) {
	budgets := res.hinted
	if budgets == nil {
		budgets = map[string]*budget{}
	}
	rest := lacking(keys, budgets)
	if len(rest) == 0 {
		at := res.hintedAt
		if at.IsZero() {
			at = p.Clock.Host()
		}
		return budgets, at, nil
	}
	untried := rest
	if res.hinted != nil {
		untried = slices.DeleteFunc(slices.Clone(rest), func(k string) bool {
			_, hinted := slices.BinarySearch(p.BudgetHint, k)
			return hinted
		})
	}
	var stmts []Stmt
	if len(untried) > 0 {
		stmts = append(stmts, query(s.q.LockFreeBudgets(untried)))
	}
	stmts = append(stmts, query(s.q.ReadBudgets(rest)))
	exists := len(stmts) - 1
	if s.readsDatabase(p.Clock) {
		stmts = append(stmts, query(s.d.Now(), nil))
	}
	existing := map[string]*budget{}
	var dbNow int64
	err := pipeline(ctx, tx, stmts, func(i int, rows Rows) error {
		for rows.Next() {
			var err error
			switch {
			case i < exists:
				err = loadBudget(rows, budgets)
			case i == exists:
				err = loadBudget(rows, existing)
			default:
				err = rows.Scan(&dbNow)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("lock free budgets: %w", err)
	}
	at := p.Clock.Host()
	if len(stmts) > exists+1 {
		at = FromMicros(dbNow)
	}
	if absent := lacking(rest, existing); len(absent) > 0 {
		// A budget's first claims create its row. Another claim creating
		// it at the same moment is waited for, briefly: it commits, or
		// it holds the row, which is then left as held. A row that sorts
		// before one this claim holds is created outside it instead
		// (missingBudgets).
		more, moreAt, err := s.lockBudgetRows(ctx, tx, absent, p.Clock, s.q.LockFreeBudgets, s.q.InsertBudgets, lastKey(budgets))
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("create budgets: %w", err)
		}
		for k, b := range more {
			budgets[k] = b
		}
		at = moreAt
	}
	return budgets, at, nil
}

// lacking returns the keys that have no budget in budgets.
func lacking(keys []string, budgets map[string]*budget) []string {
	var out []string
	for _, k := range keys {
		if budgets[k] == nil {
			out = append(out, k)
		}
	}
	return out
}

// yieldHeld leaves out the candidates that need a budget the claim could
// not lock (another claim holds it), counting them in res.Yielded, and the
// keys of those budgets.
func yieldHeld(cands []*Job, checks [][]check, keys []string, budgets map[string]*budget, res *ClaimResult) ([]*Job, [][]check, []string) {
	held := func(c check) bool { return budgets[c.key] == nil }
	keptJobs, keptChecks := cands[:0:0], checks[:0:0]
	for i, j := range cands {
		if slices.ContainsFunc(checks[i], held) {
			res.Yielded++
			continue
		}
		keptJobs, keptChecks = append(keptJobs, j), append(keptChecks, checks[i])
	}
	locked := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return budgets[k] == nil })
	return keptJobs, keptChecks, locked
}
