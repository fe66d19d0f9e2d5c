package engine

import (
	"context"
	"fmt"
	"slices"
)

// lostHolders locks the running holders of the keys expired (sorted) whose
// semaphores sl holds, skipping those another transaction holds, and sorts
// them: the lost ones, claimed more than their key's Duration before now
// (µs), and for each key whose running holders are not all lost, when the
// first of the others will be (its claim time plus Duration). A job that
// took its slot long before its claim (in a transaction committed late, or
// ready behind a backlog) has run for no longer than since its claim,
// whatever its key's last activity.
func (sl *slots) lostHolders(ctx context.Context, ex Executor, expired []string, now int64) (holders, map[string]int64, error) {
	q, args := sl.q.LockRunningHolders(expired)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	lost, next := holders{}, map[string]int64{}
	for rows.Next() {
		var id int64
		var key string
		var claimed nullInt64
		if err := rows.Scan(&id, &key, &claimed); err != nil {
			return nil, nil, err
		}
		ends := claimed.Int64 + sl.sems[key].DurationUS
		if !claimed.Valid || ends < now {
			lost[id] = key
		} else if n, ok := next[key]; !ok || ends < n {
			next[key] = ends
		}
	}
	return lost, next, rows.Err()
}

// MaintainSemaphores frees the slots that running jobs hold of keys that
// saw no activity for their Duration, when those jobs were claimed more
// than Duration ago (those holders are presumed lost; a ready or scheduled
// holder is not, and keeps its slot, nor is one claimed since) and hands free
// slots to blocked jobs wherever a key has both, up to limit keys each. It
// returns how many keys it freed slots of and how many blocked jobs became
// ready. It waits for no semaphore another transaction holds: such a key
// is left to a later call. The dispatcher runs it every tick.
func (s *Store) MaintainSemaphores(ctx context.Context, c Clock, limit int) (freed, unblocked int, err error) {
	var queues []string
	err = s.inTx(ctx, func(tx Tx) error {
		freed, unblocked, queues = 0, 0, nil
		at, err := s.now(ctx, tx, c)
		if err != nil {
			return err
		}
		q, args := s.q.ExpiredSemaphores(Micros(at), limit)
		expired, err := queryStrings(ctx, tx, q, args)
		if err != nil {
			return fmt.Errorf("find expired semaphores: %w", err)
		}
		q, args = s.q.BlockedKeys(limit)
		keys, err := queryStrings(ctx, tx, q, args)
		if err != nil {
			return fmt.Errorf("find blocked keys: %w", err)
		}
		keys = append(keys, expired...)
		if len(keys) == 0 {
			return nil
		}
		// All in key order, as every transaction locks semaphores, waiting
		// for none (lockDueSlots): a key another transaction holds (an
		// app's open one that enqueued a job of it, EnqueueTx) is left to
		// a later tick, as a promotion leaves it, and holds up neither the
		// other keys nor the rest of the dispatcher's round. The expired
		// ones were read unlocked, and are checked again.
		sl, _, err := s.lockDueSlots(ctx, tx, keys, nil, at)
		if err != nil {
			return err
		}
		expired = slices.DeleteFunc(expired, func(k string) bool {
			r := sl.sems[k]
			return r == nil || r.Held == 0 || r.ExpiresAt >= Micros(at)
		})
		var writes []Stmt
		if len(expired) > 0 {
			lost, next, err := sl.lostHolders(ctx, tx, expired, Micros(at))
			if err != nil {
				return fmt.Errorf("lock running slot holders: %w", err)
			}
			count, ids := lost.byKey()
			for _, k := range expired {
				sl.expire(k, count[k], next[k])
				if count[k] > 0 {
					freed++
				}
			}
			if len(ids) > 0 {
				writes = append(writes, stmt(s.q.MarkSlots(ids, false)))
			}
		}
		for k := range sl.sems {
			if err := sl.fill(ctx, k); err != nil {
				return err
			}
		}
		unblocked, queues = len(sl.handed), sl.queues
		return pipeline(ctx, tx, append(writes, sl.writes()...), nil)
	})
	if err != nil {
		return 0, 0, s.wrap(fmt.Errorf("maintain semaphores: %w", err))
	}
	s.Wake(queues...)
	return freed, unblocked, nil
}
