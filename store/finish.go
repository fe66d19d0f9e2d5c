package store

import (
	"context"
	"fmt"
	"time"
)

// Finish records the outcomes of jobs the process ran, in one transaction:
// the completed ones in one statement (deleted instead when
// DeleteOnComplete is set), the rest as transitions. A job that is no
// longer running for this process (released as lost, or by a shutdown
// that timed out) is left as it is.
func (s *Store) Finish(ctx context.Context, processID int64, now time.Time, completed []int64, others []Transition) error {
	if len(completed) == 0 && len(others) == 0 {
		return nil
	}
	nowUS := Micros(now)
	err := s.inTx(ctx, func(tx Tx) error {
		if len(completed) > 0 {
			var q string
			var args []any
			if s.DeleteOnComplete {
				q, args = s.d.DeleteJobs(completed, processID)
			} else {
				q, args = s.d.CompleteJobs(completed, processID, nowUS)
			}
			if _, err := exec(ctx, tx, q, args); err != nil {
				return fmt.Errorf("complete: %w", err)
			}
		}
		return s.transition(ctx, tx, StateRunning, processID, nowUS, others)
	})
	if err != nil {
		return s.wrap(fmt.Errorf("finish jobs: %w", err))
	}
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
	q, args := s.d.SetJobs(from, processID, now, rows)
	if _, err := exec(ctx, tx, q, args); err != nil {
		return fmt.Errorf("move jobs from %s: %w", from, err)
	}
	return nil
}

// Promote makes up to batch scheduled jobs that are due at now ready, and
// returns how many it moved and the queues they are in. Several
// dispatchers may run it at once; each job is promoted once.
func (s *Store) Promote(ctx context.Context, now time.Time, batch int) (int, []string, error) {
	var n int
	var queues []string
	err := s.inTx(ctx, func(tx Tx) error {
		n, queues = 0, nil
		q, args := s.d.LockDue(Micros(now), batch)
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("lock due jobs: %w", err)
		}
		var ids []int64
		seen := map[string]bool{}
		for rows.Next() {
			var id int64
			var queue string
			if err := rows.Scan(&id, &queue); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
			if !seen[queue] {
				seen[queue] = true
				queues = append(queues, queue)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		q, args = s.d.MarkReady(ids)
		if _, err := exec(ctx, tx, q, args); err != nil {
			return fmt.Errorf("mark ready: %w", err)
		}
		n = len(ids)
		return s.notify(ctx, tx, queues)
	})
	if err != nil {
		return 0, nil, s.wrap(fmt.Errorf("promote: %w", err))
	}
	s.Wake(queues...)
	return n, queues, nil
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
