package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RunTick runs one tick of a recurring task at most once however many
// dispatchers try: in one transaction it records (task, runAt) unless it is
// recorded already, and then calls enqueue with the transaction, whose job
// commits with the record. It reports whether this call ran the tick. When
// enqueue is nil the record alone is committed (for work that runs outside
// the transaction).
//
// With enqueue, a deadlock or serialization failure is not run again here,
// as inTx would: enqueue runs the app's code (enqueue middleware, which
// runs once per enqueue, never again for a retry), and its caller learns
// the transaction's outcome to report the enqueue's. The tick fails, its
// record and job rolled back, and the caller's next round tries it again
// (or finds it recorded by another dispatcher meanwhile).
//
// An error wraps ErrTickUnknown when the tick may have run all the same:
// this call wrote its record (and job) and the commit then failed with no
// reply that says it rolled back (a dropped connection loses the reply of
// a commit that landed).
func (s *Store) RunTick(ctx context.Context, task string, runAt, now time.Time, enqueue func(ex Executor) (int64, error)) (bool, error) {
	ran := false
	// committed is set when the last attempt wrote the tick and went on
	// to commit it.
	committed := false
	inTx := s.inTx
	if enqueue != nil {
		inTx = func(ctx context.Context, fn func(tx Tx) error) error { return s.tryTx(ctx, s.db.Begin, fn) }
	}
	err := inTx(ctx, func(tx Tx) error {
		ran, committed = false, false
		q, args := s.q.InsertTick(task, Micros(runAt), Micros(now))
		res, err := exec(ctx, tx, q, args)
		if err != nil {
			return err
		}
		if res.RowsAffected != 1 {
			return nil // another dispatcher ran this tick
		}
		ran = true
		if enqueue != nil {
			id, err := enqueue(tx)
			if err != nil {
				return err
			}
			q, args = s.q.SetTickJob(task, Micros(runAt), id)
			if _, err := exec(ctx, tx, q, args); err != nil {
				return err
			}
		}
		committed = true
		return nil
	})
	if err != nil {
		if committed && !s.retryable(err) {
			// A deadlock or serialization failure at the commit is the
			// database's word that it rolled back; any other failure of
			// the commit leaves its outcome unknown.
			err = fmt.Errorf("%w: %w", ErrTickUnknown, err)
		}
		return false, s.wrap(fmt.Errorf("recurring task %s at %s: %w", task, runAt.Format(time.RFC3339), err))
	}
	return ran, nil
}

// ErrTickUnknown marks a RunTick error after which the tick may have run
// all the same: the call wrote its record (and job), and the commit failed
// with no reply that says it rolled back.
var ErrTickUnknown = errors.New("the tick's commit failed, its outcome unknown (the tick may be recorded)")

// Tick is a recurring task's latest recorded tick.
type Tick struct {
	Task  string
	RunAt time.Time
	RanAt time.Time
	// JobID is the job the tick enqueued; 0 for maintenance tasks.
	JobID int64
}

// LastTicks returns each recurring task's latest recorded tick.
func (s *Store) LastTicks(ctx context.Context) (map[string]Tick, error) {
	rows, err := s.db.Query(ctx, s.q.LastTicks())
	if err != nil {
		return nil, s.wrap(fmt.Errorf("last ticks: %w", err))
	}
	defer rows.Close()
	out := map[string]Tick{}
	for rows.Next() {
		var t Tick
		var runAt, ranAt int64
		var job nullInt64
		if err := rows.Scan(&t.Task, &runAt, &ranAt, &job); err != nil {
			return nil, err
		}
		t.RunAt, t.RanAt, t.JobID = FromMicros(runAt), FromMicros(ranAt), job.Int64
		out[t.Task] = t
	}
	return out, rows.Err()
}

// DeleteTicks deletes the records of ticks older than before, except each
// task's latest, however old: a dispatcher that catches up after a stall
// runs the latest tick that passed unless it finds it recorded, and
// LastTicks lists it. It reads the records to delete without a lock, then
// deletes each through its primary key: none is a task's latest, which
// dispatchers write when they record a tick again, so it waits for no
// tick being recorded and none waits for it. It returns how many records
// it deleted (a record deleted meanwhile by another dispatcher's clean-up
// is counted by both).
func (s *Store) DeleteTicks(ctx context.Context, before time.Time) (int, error) {
	deleted := 0
	for {
		q, args := s.q.OldTicks(Micros(before), tickBatch)
		rows, err := s.db.Query(ctx, q, args...)
		if err != nil {
			return deleted, s.wrap(fmt.Errorf("delete old ticks: %w", err))
		}
		var stmts []Stmt
		for rows.Next() {
			var task string
			var at int64
			if err := rows.Scan(&task, &at); err != nil {
				rows.Close()
				return deleted, s.wrap(fmt.Errorf("delete old ticks: %w", err))
			}
			stmts = append(stmts, stmt(s.q.DeleteTick(task, at)))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return deleted, s.wrap(fmt.Errorf("delete old ticks: %w", err))
		}
		if len(stmts) == 0 {
			return deleted, nil
		}
		if err := pipeline(ctx, s.db, stmts, nil); err != nil {
			return deleted, s.wrap(fmt.Errorf("delete old ticks: %w", err))
		}
		deleted += len(stmts)
		if len(stmts) < tickBatch {
			return deleted, nil
		}
	}
}

// tickBatch is how many old tick records DeleteTicks reads, then deletes,
// at a time.
const tickBatch = 500
