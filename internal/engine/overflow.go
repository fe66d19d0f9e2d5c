package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/ratelimit"
)

// Overflow is a budget a claim deferred a job on while more jobs were
// ready, and what identifies the ready jobs that would wait on it too:
// those of the same queue and kind that draw on exactly the same budgets,
// at the same costs.
type Overflow struct {
	Queue    string
	Kind     string
	RateKeys string // as stored: EncodeRateKeys
	// Key is the budget the jobs wait on.
	Key string
}

func (res *ClaimResult) noteOverflow(o Overflow) {
	if !slices.Contains(res.Overflows, o) {
		res.Overflows = append(res.Overflows, o)
	}
}

// DeferOverflow defers one batch of the ready jobs that a claim found would
// wait on a budget, as a claim would defer them — each the next free slot
// within the horizon, or parked past it — but in one set-based transaction
// of its own instead of claim after claim: a flood of jobs on one tight
// budget leaves the ready queue in a few statements, and each job still
// moves once. It stops when the budget has room again (the claims admit
// what comes next) or when a job like the flood's more urgent than the
// budget's slotted jobs is ready (the claims give it the slot of a less
// urgent one), and moves nothing of a paused queue (its jobs stay
// where they are until it resumes; a sweep that began before the pause
// ends). It returns the ids of the jobs it deferred (those it read to
// defer them: it runs no statement more for them) and the slots it handed
// out, one each to the jobs it scheduled, in order; the rest, past the
// horizon, it parked. Fewer jobs than batch when the flood is out of the
// way.
// Callers repeat it, pausing between batches so that the claims around
// them keep their pace.
//
// It never holds the budget while it works: it reads the budget, defers
// the jobs, and moves the budget's slot cursor only if no claim moved it
// meanwhile and no claim or Reprice charged it under another limit (a
// compare-and-set at the very end, so claims wait for it no longer than
// its commit); if one did, it starts the batch again, under the limit now
// recorded: slots counted in the old limit's intervals would put the
// cursor up to one of them past the horizon of a looser one.
func (s *Store) DeferOverflow(ctx context.Context, c Clock, o Overflow, horizon time.Duration, batch int) ([]int64, []time.Time, error) {
	if horizon <= 0 {
		horizon = DefaultHorizon
	}
	if batch <= 0 {
		batch = 1000
	}
	cost := costOn(o.RateKeys, o.Key)
	for range maxCursorRaces {
		ids, slots, err := s.deferOverflow(ctx, c, o, horizon, batch, cost)
		if errors.Is(err, errCursorMoved) {
			continue
		}
		if err != nil {
			return nil, nil, s.wrap(fmt.Errorf("defer the overflow of %s: %w", o.Key, err))
		}
		return ids, slots, nil
	}
	return nil, nil, nil // the claims are busy with the budget: leave it to them
}

// maxCursorRaces bounds the batches DeferOverflow starts again after a
// claim moved the budget's cursor under it.
const maxCursorRaces = 3

var errCursorMoved = errors.New("the budget's slot cursor or limit changed")

func (s *Store) deferOverflow(ctx context.Context, c Clock, o Overflow, horizon time.Duration, batch, cost int) ([]int64, []time.Time, error) {
	var deferred []int64
	var slots []time.Time
	err := s.inTx(ctx, func(tx Tx) error {
		deferred, slots = nil, nil
		at, err := s.now(ctx, tx, c)
		if err != nil {
			return err
		}
		q, args := s.q.GetBudget(o.Key)
		rows, err := queryBudgets(ctx, tx, q, args)
		if err != nil || len(rows) == 0 {
			return err
		}
		b := &budget{row: rows[0], state: ratelimit.State{TAT: rows[0].TAT, NextSlot: rows[0].NextSlot}}
		p := b.params()
		now, err := budgetNow(at)
		if err != nil {
			return err
		}
		if p.Interval == 0 || !p.Fits(cost) {
			return nil // never charged yet, or over its burst: the claims decide
		}
		ok, earliest := p.Check(b.state, now, cost)
		if ok {
			return nil // room again: the claims admit what comes next
		}
		q, args = s.q.LockReadyLike(o.Queue, o.Kind, o.RateKeys, batch)
		ids, prios, err := queryIDPriorities(ctx, tx, q, args)
		if err != nil || len(ids) == 0 || prios[0] < b.lowest(now) {
			// A job more urgent than those slotted ahead is left to the
			// claims, which give it the slot of a less urgent one: the
			// sweep ends, for the claims beside it leave the jobs like
			// the flood's to it, and the budget would meanwhile admit
			// its less urgent jobs ahead of it.
			return err
		}
		read := b.row
		until := ratelimit.Later(now, horizon.Nanoseconds())
		jobs := make([]SetRow, len(ids))
		parked := 0
		for i, id := range ids {
			b.slotted(prios[i], now)
			if slot, ok := slotFor(b, p, earliest, now, until, cost); ok {
				jobs[i] = SetRow{ID: id, State: StateScheduled, RunAt: microsAfter(slot), WaitKey: o.Key, Deferral: deferralReason(o.Key, false)}
				slots = append(slots, FromNanos(slot))
			} else {
				jobs[i] = SetRow{ID: id, State: StateParked, WaitKey: o.Key, Deferral: deferralReason(o.Key, true)}
				parked++
			}
		}
		var moved Result
		q, args = s.q.MoveCursor(read, b.state.NextSlot, parked, b.row.SlottedPriority)
		err = pipeline(ctx, tx, s.q.setJobRuns(StateReady, 0, Micros(at), jobs), nil)
		if err == nil {
			moved, err = exec(ctx, tx, q, args)
		}
		if err == nil && moved.RowsAffected != 1 {
			err = errCursorMoved
		}
		deferred = ids
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return deferred, slots, nil
}

// queryIDPriorities reads rows of id and priority.
func queryIDPriorities(ctx context.Context, ex Executor, q string, args []any) ([]int64, []int, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var ids []int64
	var prios []int
	for rows.Next() {
		var id int64
		var prio int
		if err := rows.Scan(&id, &prio); err != nil {
			return nil, nil, err
		}
		ids, prios = append(ids, id), append(prios, prio)
	}
	return ids, prios, rows.Err()
}
