package engine

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Promote makes up to batch scheduled jobs that are due at now ready, and
// returns how many it moved and the queues that gained ready jobs. A job
// with a concurrency limit takes a slot as it becomes ready, unless it
// kept its slot while it waited (a retry); with none free it is blocked,
// or discarded when its limit says so. Several dispatchers may run it at
// once; each job is promoted once.
func (s *Store) Promote(ctx context.Context, c Clock, batch int) (int, []string, error) {
	var n int
	var queues []string
	err := s.inTx(ctx, func(tx Tx) error {
		n, queues = 0, nil
		at, err := s.now(ctx, tx, c)
		if err != nil {
			return err
		}
		nowUS := Micros(at)
		q, args := s.q.LockDue(nowUS, batch)
		due, err := scanDue(ctx, tx, q, args)
		if err != nil {
			return fmt.Errorf("lock due jobs: %w", err)
		}
		n = len(due)
		pr, err := s.promote(ctx, tx, due, nowUS, true, nil)
		queues = pr.queues
		return err
	})
	if err != nil {
		return 0, nil, s.wrap(fmt.Errorf("promote: %w", err))
	}
	s.Wake(queues...)
	return n, queues, nil
}

// promotion is what a promote did: the queues that gained ready jobs, the
// jobs made ready, and those of them that took a concurrency slot.
type promotion struct {
	queues         []string
	ready, slotted []int64
}

// promote makes locked scheduled jobs ready, taking a concurrency slot for
// each that needs one (blocking or discarding it when none is free), and
// says what it did; it wakes the workers of the queues that gained ready
// jobs when notify is set. It also locks the semaphores of also, with
// those it needs, in key order (ClaimParams.slotHint).
func (s *Store) promote(ctx context.Context, ex Executor, due []DueRow, nowUS int64, notify bool, also []string) (promotion, error) {
	if len(due) == 0 && len(also) == 0 {
		return promotion{}, nil
	}
	var ready, slotted []int64
	keys := slices.Clone(also)
	var queues []string
	for _, d := range due {
		if d.Conc != nil && !d.HoldsSlot {
			keys = append(keys, d.Conc.Key)
		}
	}
	var sl *slots
	if len(keys) > 0 {
		var err error
		if sl, err = s.lockSlots(ctx, ex, keys, At(FromMicros(nowUS))); err != nil {
			return promotion{}, err
		}
	}
	var others []SetRow
	for _, d := range due {
		switch {
		case d.Conc == nil || d.HoldsSlot:
		case sl.take(d.Conc):
			slotted = append(slotted, d.ID)
		case d.Conc.Discard:
			others = append(others, SetRow{ID: d.ID, State: StateCancelled, Error: DiscardedError + " for " + d.Conc.Key, FinishedAt: nowUS})
			continue
		default:
			others = append(others, SetRow{ID: d.ID, State: StateBlocked})
			continue
		}
		ready = append(ready, d.ID)
		if !slices.Contains(queues, d.Queue) {
			queues = append(queues, d.Queue)
		}
	}
	var writes []Stmt
	if len(ready) > 0 {
		writes = append(writes, stmt(s.q.MarkReady(ready)))
	}
	if len(slotted) > 0 {
		writes = append(writes, stmt(s.q.MarkSlots(slotted, true)))
	}
	if len(others) > 0 {
		writes = append(writes, stmt(s.q.SetJobs(StateScheduled, 0, nowUS, others)))
	}
	if sl != nil {
		writes = append(writes, sl.writes()...)
	}
	if q, args := s.q.Notify(queues); notify && q != "" && len(queues) > 0 {
		writes = append(writes, stmt(q, args))
	}
	return promotion{queues: queues, ready: ready, slotted: slotted}, pipeline(ctx, ex, writes, nil)
}

// scanDue reads LockDue's rows.
func scanDue(ctx context.Context, ex Executor, q string, args []any) ([]DueRow, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DueRow
	for rows.Next() {
		var d DueRow
		var key nullString
		var limit int
		var duration int64
		var discard bool
		if err := rows.Scan(&d.ID, &d.Queue, &key, &limit, &duration, &discard, &d.HoldsSlot); err != nil {
			return nil, err
		}
		if key.Valid {
			d.Conc = &Conc{Key: key.String, To: limit, Duration: time.Duration(duration) * time.Microsecond, Discard: discard}
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
