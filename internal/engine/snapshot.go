package engine

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// A claim whose budgets are contended spends most of its time holding
// them: the budget locks are taken with the candidates and held through
// the decision, the writes that mark hundreds of jobs running, and the
// commit, and every other claim on those budgets waits that long. Two
// workers claiming under one loose limit thus take turns.
//
// A claim that reads its hinted budgets without a lock (a snapshot), and
// finds on them that every candidate it would take is admitted, marks
// those jobs running before it locks the budgets, in the same round trip.
// It then decides again on the locked rows, as of the time it read with
// the snapshot, and keeps the first decision only if the second is the
// same and nothing else moved: the same jobs admitted, nothing deferred,
// failed, displaced or unparked, and no budget changed since the snapshot
// but by charges (no cursor moved, no job parked, no limit changed).
// Otherwise it starts again as a classic claim (errHintMissed). The locks
// are then held only for the decision, the budgets' write and the commit.
//
// Its decision time may come before that of a claim that charged the
// budget after the snapshot: the clock is read before the lock, not after.
// That is sound. A GCRA budget admits at most To in any window of Per
// whatever the order of the times its admissions are charged at: each
// admission in a window raises the budget's TAT by its cost from at least
// the window's start, and the last one charged was admitted only if that
// left TAT within Burst intervals of its time, which is inside the window.
// A claim that admits at an earlier time than the budget's last decision
// is held to a stricter test than one at the later time.

// snapshotEligible says whether a claim that reads its hint reads it as a
// snapshot: when asked to (SnapshotHint), on a database with row locks
// (where claims wait for each other's budgets), and not while it promotes
// due jobs, whose early admissions (DueLead) decide as of a slot.
func (s *Store) snapshotEligible(p ClaimParams) bool {
	return p.SnapshotHint && !p.PromoteDue && s.d.Capabilities().RowLocks
}

// snapshotBudgets decides a claim's limits on the snapshot its candidates
// came with (res.hinted). When every budget is in it, none has parked jobs,
// and every candidate it takes is admitted, it marks those jobs running,
// then locks the budgets, and returns them with the snapshot's time; the
// caller decides again on them and checks the outcome (checkSnapshot).
// Otherwise it locks the budgets as a classic claim does, and marked is
// nil. The snapshot holds no lock, so either way budgets are locked in key
// order with nothing held.
func (s *Store) snapshotBudgets(ctx context.Context, tx Tx, keys []string, p ClaimParams, cands []*Job, checks [][]check, res *ClaimResult) (budgets map[string]*budget, at time.Time, marked []int64, err error) {
	at = res.hintedAt
	if at.IsZero() {
		at = p.Clock.Host()
	}
	marked, ok := admitsAll(p, cands, checks, res.hinted, keys, Nanos(at))
	if !ok {
		budgets, at, err = s.lockBudgets(ctx, tx, keys, p.Clock)
		return budgets, at, nil, err
	}
	budgets = make(map[string]*budget, len(keys))
	stmts := []Stmt{stmt(s.q.MarkRunning(marked, p.ProcessID, Micros(at))), query(s.q.LockBudgets(keys))}
	err = pipeline(ctx, tx, stmts, func(_ int, rows Rows) error {
		for rows.Next() {
			if err := loadBudget(rows, budgets); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, time.Time{}, nil, fmt.Errorf("mark admitted jobs and lock budgets: %w", err)
	}
	for _, k := range keys {
		snap, locked := res.hinted[k], budgets[k]
		if !unchanged(snap, locked) {
			return nil, time.Time{}, nil, errHintMissed
		}
		res.Contended = res.Contended || snap.row.TAT != locked.row.TAT || snap.row.UpdatedAt != locked.row.UpdatedAt
	}
	return budgets, at, marked, nil
}

// admitsAll decides the candidates on copies of the snapshot's budgets as
// of now (ns), and returns the ids of the jobs the claim takes when every
// budget is in the snapshot, none has parked jobs, and no candidate it
// checks is denied; false otherwise.
func admitsAll(p ClaimParams, cands []*Job, checks [][]check, snap map[string]*budget, keys []string, now int64) ([]int64, bool) {
	budgets := make(map[string]*budget, len(keys))
	for _, k := range keys {
		b := snap[k]
		if b == nil || b.row.Parked > 0 {
			return nil, false
		}
		c := *b
		c.taken = nil
		budgets[k] = &c
	}
	var ids []int64
	for i, j := range cands {
		full := len(ids) == p.Max
		for _, c := range checks[i] {
			b := budgets[c.key]
			if b.params() != c.spec.Params {
				return nil, false // a changed limit: its rules apply under the lock
			}
			if ok, _ := c.spec.Params.Check(b.state, now, c.cost); !ok {
				return nil, false
			}
		}
		if full {
			continue
		}
		for _, c := range checks[i] {
			c.spec.Params.Charge(&budgets[c.key].state, now, c.cost)
		}
		ids = append(ids, j.ID)
	}
	return ids, len(ids) > 0
}

// unchanged says whether a budget locked after its snapshot was at most
// charged in between, by claims that may have decided after the snapshot's
// time: a claim may still decide on it as of that time, since a GCRA
// budget's bound holds whatever the order of the times its admissions are
// charged at (docs/rate-limits.md, "Claims on a snapshot").
func unchanged(snap, locked *budget) bool {
	if snap == nil || locked == nil {
		return false
	}
	a, b := snap.row, locked.row
	return a.NextSlot == b.NextSlot && a.Parked == b.Parked && a.SlottedPriority == b.SlottedPriority &&
		a.IntervalNS == b.IntervalNS && a.Burst == b.Burst
}

// checkSnapshot returns errHintMissed unless the decision on the locked
// budgets took exactly the jobs the snapshot marked running, moved no
// other job (moved counts those deferred, failed, unparked and displaced),
// and had no shadow limit deny one.
func checkSnapshot(marked []int64, admitted []*Job, moved int, res *ClaimResult) error {
	same := slices.EqualFunc(marked, admitted, func(id int64, j *Job) bool { return id == j.ID })
	if !same || moved > 0 || len(res.Shadowed) > 0 {
		return errHintMissed
	}
	return nil
}
