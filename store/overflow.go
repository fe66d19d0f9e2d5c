package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Overflow is a budget whose slots reach past the horizon, found by a
// claim that parked a job on it, and what identifies the ready jobs that
// would park there too: those of the same queue and kind that draw on
// exactly the same budgets, at the same costs.
type Overflow struct {
	Queue    string
	Kind     string
	RateKeys string // as stored: EncodeRateKeys
	// Key is the budget the jobs park on.
	Key string
}

func (res *ClaimResult) noteOverflow(o Overflow) {
	if !slices.Contains(res.Overflows, o) {
		res.Overflows = append(res.Overflows, o)
	}
}

// ParkOverflow parks one batch of the ready jobs that a claim found would
// park on an overflowing budget: a flood of jobs on one tight budget
// moves out of the ready queue in a few set-based statements instead of
// one claim window at a time, and each parked job still moves once (the
// dispatcher and the claims give it a slot when the horizon reaches it).
// The batch is one transaction that checks on c's time that the budget's
// slots still reach past the horizon (or that it is paused), parks the
// jobs no other transaction holds, and adds them to the budget's count. It
// returns how many jobs it parked: fewer than batch when the flood is out
// of the way, or the budget has room again. Callers repeat it, pausing
// between batches so that the claims around them keep their pace.
func (s *Store) ParkOverflow(ctx context.Context, c Clock, o Overflow, horizon time.Duration, batch int) (int, error) {
	if horizon <= 0 {
		horizon = DefaultHorizon
	}
	if batch <= 0 {
		batch = 2000
	}
	n := 0
	{
		err := s.inTx(ctx, func(tx Tx) error {
			n = 0
			// The budget is read, not locked: claims keep deciding its
			// jobs while the batch moves. The batch locks its jobs first
			// and the budget's row last, as claims do, and only to count
			// what it parked.
			at, err := s.now(ctx, tx, c)
			if err != nil {
				return err
			}
			q, args := s.d.GetBudget(o.Key)
			rows, err := queryBudgets(ctx, tx, q, args)
			if err != nil || len(rows) == 0 {
				return err
			}
			if p := rows[0].Params(); !p.Paused && rows[0].NextSlot <= Nanos(at)+horizon.Nanoseconds() {
				return nil // slots within the horizon again: claims hand them out
			}
			q, args = s.d.LockReadyLike(o.Queue, o.Kind, o.RateKeys, batch)
			ids, err := queryInt64s(ctx, tx, q, args)
			if err != nil || len(ids) == 0 {
				return err
			}
			q, args = s.d.MarkParked(ids, o.Key)
			res, err := exec(ctx, tx, q, args)
			if err != nil {
				return err
			}
			n = int(res.RowsAffected)
			q, args = s.d.AddParked(o.Key, n)
			_, err = exec(ctx, tx, q, args)
			return err
		})
		if err != nil {
			return 0, s.wrap(fmt.Errorf("park overflow of %s: %w", o.Key, err))
		}
	}
	return n, nil
}
