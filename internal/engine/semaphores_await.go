package engine

import (
	"context"
	"fmt"
)

// AwaitSemaphores waits until no other transaction holds the semaphores
// of keys, or ctx is done: it locks them, in key order, in a transaction
// that holds nothing else and changes nothing, which ends as soon as it
// has them. A worker waits so for the keys of the results FinishUnwaiting
// left (a stopping worker, a Drain with no job left), then writes them
// again: the wait holds no job's row, so a wait the caller gives up (on
// MySQL the server goes on waiting until the lock comes or its
// innodb_lock_wait_timeout runs out, though the connection is closed)
// holds back no release of those jobs, and deadlocks with nothing. A key
// with no row has nothing to wait for. Where a transaction holds the only
// write lock there is nothing to wait for either: it returns at once.
func (s *Store) AwaitSemaphores(ctx context.Context, keys []string) error {
	if len(keys) == 0 || !s.d.Capabilities().RowLocks {
		return nil
	}
	keys = sortedKeys(keys)
	err := s.inTx(ctx, func(tx Tx) error {
		for run := range s.keyRuns(keys) {
			q, args := s.q.LockSemaphores(run)
			if _, err := exec(ctx, tx, q, args); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s.wrap(fmt.Errorf("wait for semaphores: %w", err))
	}
	return nil
}
