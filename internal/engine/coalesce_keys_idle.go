package engine

import (
	"context"
	"fmt"
	"time"
)

// ClearCoalesceKeys deletes, batchSize at a time with a pause between
// batches, the rows of coalesce keys (sluice_coalesce_keys) that no
// transaction holds, and returns how many it deleted. A row serves only to
// be locked by a call of its key, where the database locks index entries
// apart from rows (IndexLocks: MySQL), and the next call creates it again
// (LockCoalesceKeys), so any row not in use may go. Elsewhere the table
// stays empty and nothing is read.
//
// Each batch locks the next rows in key order without waiting, deletes
// them and commits: it holds no other lock and waits for none, so it
// deadlocks with no one; a call that wants a row it holds waits for its
// commit, then creates the row anew.
func (s *Store) ClearCoalesceKeys(ctx context.Context, batchSize int, pause time.Duration) (int, error) {
	if !s.d.Capabilities().IndexLocks {
		return 0, nil
	}
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
			q, args = s.q.DeleteCoalesceKeys(idle)
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
