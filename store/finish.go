package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Finish records the outcomes of jobs the process ran, in one transaction:
// the completed ones in one statement (deleted instead when
// DeleteOnComplete is set), the rest as transitions. slotHolders lists the
// jobs among them that held a concurrency slot when claimed and now finish
// for good (completed, failed, cancelled): their slots are given back,
// each to the first job blocked on its key. A job that is no longer
// running for this process (released as lost, or by a shutdown that timed
// out) is left as it is, its slot too.
func (s *Store) Finish(ctx context.Context, processID int64, now time.Time, completed []int64, others []Transition, slotHolders []int64) error {
	if len(completed) == 0 && len(others) == 0 {
		return nil
	}
	nowUS := Micros(now)
	var woke []string
	err := s.inTx(ctx, func(tx Tx) error {
		woke = nil
		hs, err := s.lockHolders(ctx, tx, slotHolders, processID)
		if err != nil {
			return err
		}
		var writes []Stmt
		if len(completed) > 0 {
			if s.DeleteOnComplete {
				writes = append(writes, stmt(s.d.DeleteJobs(completed, processID)))
			} else {
				writes = append(writes, stmt(s.d.CompleteJobs(completed, processID, nowUS)))
			}
		}
		if len(others) > 0 {
			writes = append(writes, stmt(s.d.SetJobs(StateRunning, processID, nowUS, setRows(others, nowUS))))
		}
		gives, queues, err := s.giveBack(ctx, tx, nowUS, hs)
		if err != nil {
			return err
		}
		woke = queues
		return pipeline(ctx, tx, append(writes, gives...), nil)
	})
	if err != nil {
		return s.wrap(fmt.Errorf("finish jobs: %w", err))
	}
	s.Wake(woke...)
	return nil
}

// Release puts jobs the process claimed but did not finish back to ready,
// giving back the attempt their claim counted. A worker shutting down
// calls it for the jobs still running when its timeout ran out.
func (s *Store) Release(ctx context.Context, processID int64, now time.Time, ids []int64) error {
	ts := make([]Transition, len(ids))
	for i, id := range ids {
		ts[i] = Transition{ID: id, State: StateReady, RunAt: now, AttemptDelta: -1}
	}
	err := s.inTx(ctx, func(tx Tx) error {
		if err := s.transition(ctx, tx, StateRunning, processID, Micros(now), ts); err != nil {
			return err
		}
		return s.notify(ctx, tx, []string{"*"})
	})
	if err != nil {
		return s.wrap(fmt.Errorf("release jobs: %w", err))
	}
	s.Wake("*")
	return nil
}

// transition applies transitions to jobs in state from.
func (s *Store) transition(ctx context.Context, tx Executor, from State, processID, now int64, ts []Transition) error {
	if len(ts) == 0 {
		return nil
	}
	q, args := s.d.SetJobs(from, processID, now, setRows(ts, now))
	if _, err := exec(ctx, tx, q, args); err != nil {
		return fmt.Errorf("move jobs from %s: %w", from, err)
	}
	return nil
}

// setRows turns transitions into SetJobs rows.
func setRows(ts []Transition, now int64) []SetRow {
	rows := make([]SetRow, len(ts))
	for i, t := range ts {
		rows[i] = SetRow{ID: t.ID, State: t.State, WaitKey: t.WaitKey, Error: t.Error, AttemptDelta: t.AttemptDelta}
		if !t.RunAt.IsZero() {
			rows[i].RunAt = Micros(t.RunAt)
		}
		if t.Finished {
			rows[i].FinishedAt = now
		}
	}
	return rows
}

// Promote makes up to batch scheduled jobs that are due at now ready, and
// returns how many it moved and the queues that gained ready jobs. A job
// with a concurrency limit takes a slot as it becomes ready, unless it
// kept its slot while it waited (a retry); with none free it is blocked,
// or discarded when its limit says so. Several dispatchers may run it at
// once; each job is promoted once.
func (s *Store) Promote(ctx context.Context, now time.Time, batch int) (int, []string, error) {
	nowUS := Micros(now)
	var n int
	var queues []string
	err := s.inTx(ctx, func(tx Tx) error {
		n, queues = 0, nil
		q, args := s.d.LockDue(nowUS, batch)
		due, err := scanDue(ctx, tx, q, args)
		if err != nil {
			return fmt.Errorf("lock due jobs: %w", err)
		}
		if len(due) == 0 {
			return nil
		}
		var ready, slotted []int64
		var keys []string
		for _, d := range due {
			if d.Conc != nil && !d.HoldsSlot {
				keys = append(keys, d.Conc.Key)
			}
		}
		var sl *slots
		if len(keys) > 0 {
			if sl, err = s.lockSlots(ctx, tx, keys, nowUS); err != nil {
				return err
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
			writes = append(writes, stmt(s.d.MarkReady(ready)))
		}
		if len(slotted) > 0 {
			writes = append(writes, stmt(s.d.MarkSlots(slotted, true)))
		}
		if len(others) > 0 {
			writes = append(writes, stmt(s.d.SetJobs(StateScheduled, 0, nowUS, others)))
		}
		if sl != nil {
			writes = append(writes, sl.writes()...)
		}
		if q, args := s.d.Notify(queues); q != "" && len(queues) > 0 {
			writes = append(writes, stmt(q, args))
		}
		n = len(due)
		return pipeline(ctx, tx, writes, nil)
	})
	if err != nil {
		return 0, nil, s.wrap(fmt.Errorf("promote: %w", err))
	}
	s.Wake(queues...)
	return n, queues, nil
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

// notify wakes listening workers for queues that gained ready jobs, on
// databases that can.
func (s *Store) notify(ctx context.Context, ex Executor, queues []string) error {
	if len(queues) == 0 {
		return nil
	}
	q, args := s.d.Notify(queues)
	if q == "" {
		return nil
	}
	if _, err := exec(ctx, ex, q, args); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// DeleteFinished deletes, batch at a time, completed and cancelled jobs
// that finished before the given time, and returns how many it deleted.
// Failed jobs are kept until retried or cancelled.
func (s *Store) DeleteFinished(ctx context.Context, before time.Time, batch int) (int, error) {
	if batch <= 0 {
		batch = 500
	}
	total := 0
	for {
		q, args := s.d.DeleteFinished(Micros(before), batch)
		res, err := exec(ctx, s.db, q, args)
		if err != nil {
			return total, s.wrap(fmt.Errorf("delete finished jobs: %w", err))
		}
		total += int(res.RowsAffected)
		if res.RowsAffected < int64(batch) || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}
