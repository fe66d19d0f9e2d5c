package engine

import (
	"context"
	"fmt"
	"time"
)

// SemaphoreIdleAge is how long a concurrency key's semaphore goes with no
// slot held and no activity (no slot taken or given back, no limit
// declared) before ClearIdleSemaphores deletes it, when no job is blocked
// on it.
const SemaphoreIdleAge = time.Hour

// ClearIdleSemaphores deletes, batchSize at a time with a pause between
// batches, the semaphores of concurrency keys that hold no slot, saw no
// activity for idleFor (by c's time, read in each batch's transaction),
// and have no blocked job. Such a row says only the limit last declared,
// which the key's next enqueue declares again (a worker's start declares
// limits only on the rows that exist, DeclareSemaphores; and a job coming
// back to a key with no row takes its own: docs/concurrency.md). It
// returns how many it deleted.
//
// Each batch locks its rows, the next ones in the table's key order,
// without waiting (a row another transaction holds is in use, and
// skipped), and only then reads which of them have a blocked job: a
// transaction that blocks a job holds its key's row until it commits, so
// the read, which starts after the lock, sees every blocked job of the
// rows the batch holds. The batch holds no other lock and waits for none,
// so it deadlocks with no one; an enqueue or a claim that wants a row it
// holds waits for its commit, and then creates the row anew
// (InsertSemaphores locks the rows it finds, so a row it found cannot be
// deleted before it is locked).
func (s *Store) ClearIdleSemaphores(ctx context.Context, c Clock, idleFor time.Duration, batchSize int, pause time.Duration) (int, error) {
	after := ""
	return inBatches(ctx, batchSize, pause, func(limit int) (found, deleted int, err error) {
		var last string
		err = s.inTx(ctx, func(tx Tx) error {
			found, deleted, last = 0, 0, ""
			at, err := s.now(ctx, tx, c)
			if err != nil {
				return err
			}
			q, args := s.q.LockIdleSemaphores(after, Micros(at.Add(-idleFor)), limit)
			idle, err := queryStrings(ctx, tx, q, args)
			if err != nil || len(idle) == 0 {
				return err
			}
			found = len(idle)
			q, args = s.q.BlockedAmong(idle)
			blocked, err := queryStrings(ctx, tx, q, args)
			if err != nil {
				return err
			}
			keep := make(map[string]bool, len(blocked))
			for _, k := range blocked {
				keep[k] = true
			}
			var gone []string
			for _, k := range idle {
				if !keep[k] {
					gone = append(gone, k)
				}
			}
			if len(gone) > 0 {
				q, args = s.q.DeleteSemaphores(gone)
				res, err := exec(ctx, tx, q, args)
				if err != nil {
					return err
				}
				deleted = int(res.RowsAffected)
			}
			last = idle[len(idle)-1]
			return nil
		})
		if err != nil {
			return 0, 0, s.wrap(fmt.Errorf("clear idle semaphores: %w", err))
		}
		// The next batch starts after this one's last key, past the rows
		// kept for their blocked jobs.
		after = last
		return found, deleted, nil
	})
}

// inBatches runs batch, which handles up to size rows and reports how
// many it found and how many it cleared, until one finds fewer than size,
// pausing between batches, and returns how many they cleared. A size of
// 0 or less is 500.
func inBatches(ctx context.Context, size int, pause time.Duration, batch func(size int) (found, cleared int, err error)) (int, error) {
	if size <= 0 {
		size = 500
	}
	total := 0
	for {
		found, cleared, err := batch(size)
		total += cleared
		if err != nil || found < size {
			return total, err
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
				return total, ctx.Err()
			case <-time.After(pause):
			}
		}
	}
}
