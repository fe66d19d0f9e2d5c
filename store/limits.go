package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/ratelimit"
)

// check is one budget a candidate must pass.
type check struct {
	key  string
	spec ratelimit.Spec
	cost int
}

// applyLimits decides the locked candidates against their budgets, in
// candidate order. It locks the budgets (sorted by key), reads the time
// after the locks, charges every budget of each admitted job, and gives
// each denied job a slot on the budget that holds it longest, or parks it
// there when that budget's slots reach past the horizon. It returns the
// admitted jobs and the statements that write the budgets and the deferred
// jobs, the deferred jobs that hold concurrency slots (to give back), and
// records the decision time in res. Candidates without a limit cost
// nothing: with none among them it runs no statement at all.
func (s *Store) applyLimits(ctx context.Context, tx Tx, p ClaimParams, cands []*Job, res *ClaimResult) ([]*Job, []Stmt, holders, error) {
	checks := make([][]check, len(cands))
	var keys []string
	queueLimits := map[string][]QueueLimit{}
	for i, j := range cands {
		for _, rk := range j.RateKeys {
			spec, ok := p.Limits.RateSpec(j.Kind, rk.Key)
			if !ok {
				continue
			}
			checks[i] = append(checks[i], check{key: rk.Key, spec: spec, cost: rk.Cost})
			keys = append(keys, rk.Key)
		}
		ql, seen := queueLimits[j.Queue]
		if !seen {
			ql = p.Limits.QueueLimits(j.Queue)
			queueLimits[j.Queue] = ql
		}
		for _, l := range ql {
			checks[i] = append(checks[i], check{key: l.Key, spec: l.Spec, cost: 1})
			keys = append(keys, l.Key)
		}
	}
	if len(keys) == 0 {
		return cands[:min(len(cands), p.Max)], nil, nil, nil
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	budgets, at, err := s.lockBudgets(ctx, tx, keys, p)
	if err != nil {
		return nil, nil, nil, err
	}
	res.DecidedAt = at
	now := Micros(at)
	horizon := p.Horizon
	if horizon <= 0 {
		horizon = DefaultHorizon
	}
	until := now + horizon.Microseconds()

	admitted := make([]*Job, 0, min(len(cands), p.Max))
	var deferred []SetRow
	gives := holders{} // deferred jobs give their concurrency slots back while they wait
	for i, j := range cands {
		full := len(admitted) == p.Max // past Max, only deferrals are taken
		cs := checks[i]
		if len(cs) == 0 {
			if !full {
				admitted = append(admitted, j)
			}
			continue
		}
		var holder *check
		var latest int64
		var shadowed *check
		for k := range cs {
			c := &cs[k]
			b := budgets[c.key]
			b.prepare(c.spec.Params, now)
			ok, earliest := c.spec.Params.Check(b.state, now, c.cost)
			switch {
			case ok:
			case c.spec.Shadow:
				if shadowed == nil {
					shadowed = c
				}
			case holder == nil || earliest > latest:
				holder, latest = c, earliest
			}
		}
		if holder == nil && full {
			continue // it would be admitted, but the claim is full: it stays ready
		}
		if holder == nil {
			// Admitted: charge every budget that admitted it. A shadow
			// limit that would have denied is not charged, as a denial
			// never is.
			for _, c := range cs {
				b := budgets[c.key]
				if ok, _ := c.spec.Params.Check(b.state, now, c.cost); ok {
					c.spec.Params.Charge(&b.state, now, c.cost)
					b.dirty = true
				}
			}
			if shadowed != nil {
				res.Shadowed = append(res.Shadowed, Deferral{JobID: j.ID, Kind: j.Kind, Key: shadowed.key})
			}
			admitted = append(admitted, j)
			continue
		}
		b := budgets[holder.key]
		d := Deferral{JobID: j.ID, Kind: j.Kind, Key: holder.key}
		slot, ok := s.slot(b, holder, latest, now, until)
		if ok {
			d.Until = FromMicros(slot)
			deferred = append(deferred, SetRow{ID: j.ID, State: StateScheduled, RunAt: slot, WaitKey: holder.key})
		} else {
			d.Parked = true
			b.row.Parked++
			deferred = append(deferred, SetRow{ID: j.ID, State: StateParked, WaitKey: holder.key})
		}
		b.dirty = true
		res.Deferred = append(res.Deferred, d)
		if j.HoldsSlot {
			gives[j.ID] = j.ConcKey
		}
	}
	var writes []Stmt
	if st, ok := s.saveBudgets(budgets, now); ok {
		writes = append(writes, st)
	}
	if len(deferred) > 0 {
		writes = append(writes, stmt(s.d.SetJobs(StateReady, 0, now, deferred)))
	}
	return admitted, writes, gives, nil
}

// slot gives a denied job the next free slot on the budget that holds it,
// or reports false when the slot falls past the horizon (the job parks).
// A paused budget sends one job back at the horizon as a probe, so that
// lifting the pause is noticed within it, and parks the rest.
func (s *Store) slot(b *budget, c *check, earliest, now, until int64) (int64, bool) {
	if earliest == ratelimit.Never {
		if b.state.NextSlot > now {
			return 0, false // a probe is out
		}
		b.state.NextSlot = until // the probe's own slot: when it returns, it probes again
		return until, true
	}
	if max(earliest, b.state.NextSlot) > until {
		// No slot is handed out before earliest, so the cursor may move
		// there: the dispatcher then sees at once that nothing is due.
		b.state.NextSlot = max(b.state.NextSlot, earliest)
		return 0, false
	}
	return c.spec.Params.Slot(&b.state, earliest, c.cost), true
}

// Unpark hands slots within the horizon to parked jobs, in priority and id
// order, for up to limit budgets whose next slot has come within it, and
// returns how many jobs it scheduled. The dispatcher runs it every poll.
func (s *Store) Unpark(ctx context.Context, now time.Time, horizon time.Duration, limit int) (int, error) {
	if horizon <= 0 {
		horizon = DefaultHorizon
	}
	nowUS := Micros(now)
	until := nowUS + horizon.Microseconds()
	total := 0
	err := s.inTx(ctx, func(tx Tx) error {
		total = 0
		q, args := s.d.LockParkedBudgets(nowUS, until, limit)
		rows, err := queryBudgets(ctx, tx, q, args)
		if err != nil {
			return fmt.Errorf("lock parked budgets: %w", err)
		}
		budgets := make(map[string]*budget, len(rows))
		var moves []SetRow
		for _, r := range rows {
			b := &budget{row: r, state: ratelimit.State{TAT: r.TAT, NextSlot: r.NextSlot}}
			budgets[r.Name] = b
			got, err := s.unparkBudget(ctx, tx, b, nowUS, until)
			if err != nil {
				return err
			}
			moves = append(moves, got...)
		}
		var writes []Stmt
		if len(moves) > 0 {
			writes = append(writes, stmt(s.d.SetJobs(StateParked, 0, nowUS, moves)))
		}
		if st, ok := s.saveBudgets(budgets, nowUS); ok {
			writes = append(writes, st)
		}
		total = len(moves)
		if err := pipeline(ctx, tx, writes, nil); err != nil {
			return fmt.Errorf("schedule parked jobs: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, s.wrap(fmt.Errorf("unpark: %w", err))
	}
	return total, nil
}

// unparkBudget schedules the parked jobs of one locked budget into the
// slots that fall within the horizon.
func (s *Store) unparkBudget(ctx context.Context, tx Tx, b *budget, now, until int64) ([]SetRow, error) {
	p := b.params()
	first := max(b.state.NextSlot, now)
	want := 1
	if p.Paused && b.state.NextSlot > now {
		return nil, nil // a probe is out; it will notice when the pause lifts
	}
	if !p.Paused {
		first = max(first, b.state.TAT-p.Tolerance())
		if first > until {
			return nil, nil
		}
		want = int((until-first)/p.Interval) + 1
	}
	want = min(want, max(b.row.Parked, 1), 1000)
	q, args := s.d.LockParked(b.row.Name, want)
	ids, err := queryInt64s(ctx, tx, q, args)
	if err != nil {
		return nil, fmt.Errorf("lock parked jobs of %s: %w", b.row.Name, err)
	}
	b.dirty = true
	if len(ids) == 0 {
		b.row.Parked = 0 // the count was stale: every job it counted left
		return nil, nil
	}
	moves := make([]SetRow, len(ids))
	for i, id := range ids {
		var slot int64
		if p.Paused {
			slot = until
			b.state.NextSlot = until
		} else {
			slot = p.Slot(&b.state, first, 1)
		}
		moves[i] = SetRow{ID: id, State: StateScheduled, RunAt: slot, WaitKey: b.row.Name}
	}
	b.row.Parked = max(b.row.Parked-len(ids), 0)
	return moves, nil
}
