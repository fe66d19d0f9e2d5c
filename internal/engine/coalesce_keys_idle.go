package engine

import (
	"context"
	"fmt"
	"time"
)

// ClearCoalesceKeys deletes, batchSize at a time with a pause between
// batches, the rows of coalesce keys (sluice_coalesce_keys) whose job no
// longer holds the key (claimed, cancelled, or full), and returns how many
// it deleted. A row serves a call of its key to find the key's pending
// job and to keep others from making one meanwhile (lockCoalesceKeys); a
// job that released its key never takes it again, so such a row points to
// nothing, and the next call of the key creates it again.
//
// Each batch locks the next rows in key order without waiting (a row a
// call holds is in use, and skipped), deletes those whose job no longer
// holds the key (read without a lock: ReleasedCoalesceKeys), and commits:
// it holds no other lock and waits for none, so it deadlocks with no one; a
// call that wants a row it holds waits for its commit, then creates the
// row anew.
func (s *Store) ClearCoalesceKeys(ctx context.Context, batchSize int, pause time.Duration) (int, error) {
	after := ""
	return inBatches(ctx, batchSize, pause, func(limit int) (found, deleted int, err error) {
		var last string
		err = s.inTx(ctx, func(tx Tx) error {
			found, deleted, last = 0, 0, ""
			q, args := s.q.LockIdleCoalesceKeys(after, limit)
			idle, err := queryStrings(ctx, tx, q, args)
			if err != nil || len(idle) == 0 {
				return err
			}
			found, last = len(idle), idle[len(idle)-1]
			q, args = s.q.ReleasedCoalesceKeys(idle)
			released, err := queryStrings(ctx, tx, q, args)
			if err != nil || len(released) == 0 {
				return err
			}
			q, args = s.q.DeleteCoalesceKeys(released)
			res, err := exec(ctx, tx, q, args)
			if err != nil {
				return err
			}
			deleted = int(res.RowsAffected)
			return nil
		})
		if err != nil {
			return 0, 0, s.wrap(fmt.Errorf("clear coalesce keys: %w", err))
		}
		after = last
		return found, deleted, nil
	})
}
