package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/ratelimit"
)

// DefaultRepriceBatch is how many budgets one transaction of Reprice
// changes at most when its caller does not say.
const DefaultRepriceBatch = 500

// Repricing is a limit now in force on budgets whose jobs may all be
// parked, so that no claim would bring it to them.
type Repricing struct {
	// Target is a scope (a name without "/", a group or a kind): its
	// budgets SCOPE and SCOPE/…; or one budget's key ("Stripe/Account/7",
	// "@queue/sms").
	Target string
	// Params is the limit in force on them.
	Params ratelimit.Params
	// Except are budgets of the scope that a limit of their own covers
	// (an override on the budget): they are left as they are.
	Except []string
	// Horizon is how far ahead slots are handed out; DefaultHorizon when
	// 0.
	Horizon time.Duration
	// Batch is how many budgets one transaction changes at most;
	// DefaultRepriceBatch when 0.
	Batch int
}

// Reprice applies a changed limit to the budgets it covers that have
// parked jobs and were last charged under another limit, as the next
// claim on each would (the same rules: the debt counted in the new
// limit's intervals and, for a looser one, the slot cursor brought back to
// the horizon), and records the limit on them. A budget whose jobs are all parked
// is touched by no claim, and the dispatcher hands its parked jobs slots at
// the pace its row remembers: without this a looser limit would reach such
// a backlog only after an interval of the old one.
//
// It works in transactions of at most Batch budgets, in key order, each
// deciding on c's time read after its locks, and returns how many budgets
// it changed. Each transaction finds its budgets without locking them and
// then locks them by name, in key order, as claims lock budgets, so that
// it never holds a budget while it waits for one that sorts before it. It
// is idempotent: a budget already charged under the limit is not read
// again. Workers call it for each limit whose spec they see change, and
// once at start.
func (s *Store) Reprice(ctx context.Context, c Clock, r Repricing) (int, error) {
	if r.Batch <= 0 {
		r.Batch = DefaultRepriceBatch
	}
	total, after := 0, ""
	for {
		found, changed, last, err := s.repriceBatch(ctx, c, r, after)
		total += changed
		if err != nil {
			return total, s.wrap(fmt.Errorf("reprice the budgets of %s: %w", r.Target, err))
		}
		if found < r.Batch {
			return total, nil
		}
		after = last
	}
}

// repriceBatch is one transaction of Reprice: it finds up to r.Batch
// budgets after after, locks them, prepares for r.Params those not
// excepted that still need it and saves them. It returns how many it
// found, how many it changed and the key of the last it found.
//
// The budgets are found unlocked (ReadRepriced) and then locked by name
// in key order (LockBudgets): a locking read of the scope locks rows in
// the order of the index the database reads them through, which is not
// key order on MariaDB (the index of parked budgets, sorted after), and
// a claim holding one budget of the scope and waiting for another then
// deadlocked with it. A budget that changed in between is checked again:
// one whose parked jobs all left, or that a claim has charged under the
// limit meanwhile, is left as it is.
func (s *Store) repriceBatch(ctx context.Context, c Clock, r Repricing, after string) (found, changed int, last string, err error) {
	interval, burst := storedLimit(r.Params)
	err = s.inTx(ctx, func(tx Tx) error {
		found, changed, last = 0, 0, ""
		q, args := s.q.ReadRepriced(r.Target, after, interval, burst, r.Batch)
		names, err := queryStrings(ctx, tx, q, args)
		if err != nil {
			return fmt.Errorf("find budgets: %w", err)
		}
		if len(names) == 0 {
			return nil
		}
		found, last = len(names), names[len(names)-1]
		var rows []BudgetRow
		for run := range s.keyRuns(sortedKeys(names)) {
			q, args := s.q.LockBudgets(run)
			locked, err := queryBudgets(ctx, tx, q, args)
			if err != nil {
				return fmt.Errorf("lock budgets: %w", err)
			}
			rows = append(rows, locked...)
		}
		at, err := s.now(ctx, tx, c)
		if err != nil {
			return err
		}
		now, err := budgetNow(at)
		if err != nil {
			return err
		}
		until := ratelimit.Later(now, horizonOr(r.Horizon).Nanoseconds())
		budgets := make(map[string]*budget, len(rows))
		for _, row := range rows {
			if row.Parked == 0 || (row.IntervalNS == interval && row.Burst == burst) || slices.Contains(r.Except, row.Name) {
				continue // changed since it was found, or covered by its own limit
			}
			b := loaded(row)
			if b.prepare(r.Params, now, until); b.dirty {
				budgets[row.Name] = b
			}
		}
		save := s.saveBudgets(budgets, Micros(at))
		if len(save) == 0 {
			return nil
		}
		changed = len(budgets)
		if err := pipeline(ctx, tx, save, nil); err != nil {
			return fmt.Errorf("save budgets: %w", err)
		}
		return nil
	})
	return found, changed, last, err
}
