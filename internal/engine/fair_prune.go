package engine

import (
	"context"
	"fmt"
)

// PruneFairKeys deletes the fairness keys whose last finish is behind both
// the virtual time of their queue's priority level and the start of each
// of its waiting fair jobs (FairPruneBound): such a key has no job ready
// or waiting (its finish is past its jobs' starts), and its next job of
// that priority starts at the virtual time whether its row is there or
// not, so this changes no start time — while the virtual time does not go
// back below the bound, which only a job that was running can make it
// do, coming back with its old start (a retry, a snooze, a release; by
// less than its level's backlog). It returns how many it deleted.
//
// Each level is pruned pruneBatch keys at a time, a transaction each,
// which first locks the keys behind the bound without waiting (a key
// another transaction holds is being enqueued to, and is kept), and only
// then reads the bound again, in one statement, and deletes those of its
// keys still behind it. Read after the locks, the bound sees every job
// enqueued to them (an enqueue holds its keys' rows until it commits);
// read in one statement, on one snapshot, it sees every job that moves
// between ready and waiting meanwhile (a promotion, an unpark, a slot
// handed to a blocked job, a claim's deferral) on one side or the other.
// (Two statements, each on a snapshot of its own at READ COMMITTED,
// missed a delayed job promoted between them.)
func (s *Store) PruneFairKeys(ctx context.Context) (int, error) {
	var levels []fairLevel
	rows, err := s.db.Query(ctx, s.q.FairLevels())
	if err == nil {
		for rows.Next() {
			var l fairLevel
			if err = rows.Scan(&l.queue, &l.priority); err != nil {
				break
			}
			levels = append(levels, l)
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
	}
	if err != nil {
		return 0, s.wrap(fmt.Errorf("prune fairness keys: %w", err))
	}
	deleted := 0
	for _, l := range levels {
		n, err := s.pruneFairLevel(ctx, l)
		deleted += n
		if err != nil {
			return deleted, s.wrap(fmt.Errorf("prune fairness keys of queue %s, priority %d: %w", l.queue, l.priority, err))
		}
	}
	return deleted, nil
}

// pruneBatch is how many keys of a level one transaction of PruneFairKeys
// locks.
const pruneBatch = 500

// pruneFairLevel is PruneFairKeys for one level.
func (s *Store) pruneFairLevel(ctx context.Context, l fairLevel) (int, error) {
	after := ""
	return inBatches(ctx, pruneBatch, 0, func(limit int) (found, deleted int, err error) {
		var last string
		err = s.inTx(ctx, func(tx Tx) error {
			// Counted per attempt: a retried transaction's count starts over.
			found, deleted, last = 0, 0, ""
			before, err := s.fairPruneBound(ctx, tx, l)
			if err != nil {
				return err
			}
			q, args := s.q.LockPrunableFairKeys(l.queue, l.priority, after, before, limit)
			keys, err := queryStrings(ctx, tx, q, args)
			if err != nil || len(keys) == 0 {
				return err
			}
			found, last = len(keys), keys[len(keys)-1]
			// Again, now that the keys are held: a job enqueued to one of
			// them committed before this read, which counts it.
			if before, err = s.fairPruneBound(ctx, tx, l); err != nil {
				return err
			}
			q, args = s.q.DeleteFairKeys(l.queue, l.priority, keys, before)
			res, err := exec(ctx, tx, q, args)
			if err != nil {
				return err
			}
			deleted = int(res.RowsAffected)
			return nil
		})
		// The next batch starts after this one's last key, past the keys
		// skipped or kept.
		after = last
		return found, deleted, err
	})
}

// fairPruneBound reads what PruneFairKeys deletes a level's keys below:
// the lower of its virtual time and the lowest start of its waiting fair
// jobs, in one statement.
func (s *Store) fairPruneBound(ctx context.Context, ex Executor, l fairLevel) (int64, error) {
	q, args := s.q.FairPruneBound(l.queue, l.priority)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var vt int64
	var waiting nullInt64
	for rows.Next() {
		if err := rows.Scan(&vt, &waiting); err != nil {
			return 0, err
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if waiting.Valid {
		return min(vt, waiting.Int64), nil
	}
	return vt, nil
}
