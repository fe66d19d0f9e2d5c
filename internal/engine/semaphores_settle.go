package engine

import (
	"context"
	"maps"
	"slices"
)

// holders are jobs that hold a slot, by id, with their keys.
type holders map[int64]string

// byKey counts the holders of each key, and returns their ids, sorted.
func (hs holders) byKey() (map[string]int, []int64) {
	count := map[string]int{}
	ids := make([]int64, 0, len(hs))
	for id, key := range hs {
		count[key]++
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return count, ids
}

// giveBack returns the slots of jobs that no longer need them, clearing
// their holds_slot, and returns the statements that finish the job and the
// queues whose blocked jobs became ready. c stamps the slots' activity.
func (s *Store) giveBack(ctx context.Context, ex Executor, c Clock, hs holders) ([]Stmt, []string, error) {
	stmts, _, queues, err := s.settle(ctx, ex, c, hs, nil)
	return stmts, queues, err
}

// giveBackWith is giveBack with the semaphores locked by lock.
func (s *Store) giveBackWith(ctx context.Context, hs holders, lock func(keys []string) (*slots, error)) ([]Stmt, []string, error) {
	if len(hs) == 0 {
		return nil, nil, nil
	}
	sl, err := lock(keysOf(hs, nil))
	if err != nil {
		return nil, nil, err
	}
	gives, err := sl.giveAll(ctx, hs)
	if err != nil {
		return nil, nil, err
	}
	return append(gives, sl.writes()...), sl.queues, nil
}

// keysOf returns the keys of hs and back, sorted, without repeats.
func keysOf(hs holders, back []slotless) []string {
	keys := make([]string, 0, len(hs)+len(back))
	for _, k := range hs {
		keys = append(keys, k)
	}
	for _, b := range back {
		keys = append(keys, b.conc.Key)
	}
	return sortedKeys(keys)
}

// giveAll gives back the slots of hs, key by key, and returns the
// statement that clears their holds_slot.
func (sl *slots) giveAll(ctx context.Context, hs holders) ([]Stmt, error) {
	if len(hs) == 0 {
		return nil, nil
	}
	if err := sl.giveEach(ctx, hs); err != nil {
		return nil, err
	}
	_, ids := hs.byKey()
	return []Stmt{stmt(sl.q.MarkSlots(ids, false))}, nil
}

// giveEach gives back the slots of hs, key by key, each handed on to the
// key's first blocked jobs; the caller clears their holds_slot.
func (sl *slots) giveEach(ctx context.Context, hs holders) error {
	count, _ := hs.byKey()
	for _, k := range keysOf(hs, nil) {
		if err := sl.give(ctx, k, count[k]); err != nil {
			return err
		}
	}
	return nil
}

// slotless is a running job with a concurrency key that holds none of its
// slots: its key expired while it ran (Lost slots in
// docs/concurrency.md), and the slot may have gone to another job.
type slotless struct {
	id    int64
	queue string
	conc  *Conc
}

// settle gives back the slots of the holders hs (as giveBack does) and
// then gives each job of back — running, and about to be made ready again
// by a release or a recovery, without the slot its key needs — a free slot
// of its key, or, with none free, blocks it, as a promotion does: a job
// that runs again never runs beside the jobs its key's slots went to. It
// is never discarded: it was ready before. A job of back whose queue is
// paused takes no slot: it waits scheduled, due at once, for the resume,
// when the dispatcher promotes it (LockDue), as an enqueue's does. It
// locks all their semaphores at once, in key order (reading the paused
// queues with them when back has jobs), stamping their activity with c,
// and returns the statements that write the slots, the state each job of
// back goes to instead of ready (blocked or scheduled), and the queues
// whose blocked jobs became ready.
func (s *Store) settle(ctx context.Context, ex Executor, c Clock, hs holders, back []slotless) ([]Stmt, map[int64]State, []string, error) {
	if len(hs) == 0 && len(back) == 0 {
		return nil, nil, nil, nil
	}
	sl, err := s.lockSlotsSeeing(ctx, ex, keysOf(hs, back), c, len(back) > 0)
	if err != nil {
		return nil, nil, nil, err
	}
	return sl.settle(ctx, hs, back)
}

// settleUnwaiting is settle for a transaction that waits for no
// semaphore another transaction holds (an app's open transaction that
// enqueued a job of the key, or a lost host's, which the database ends
// only when it notices the dead connection): a reap, and a worker's
// results (FinishUnwaiting). It locks the semaphores of hs and back that
// nobody holds (lockUnheldSlots), reading c's time after the locks, and
// settles the jobs of those. A holder of another key is left out,
// returned in left, for a later reap or write: its slot is given back
// with its outcome, so it waits until its semaphore is free (a key with a
// holder has a row, which the clean-up never deletes). A job of back of
// another key takes no slot: it is blocked, and the dispatcher hands it
// one once one is free (MaintainSemaphores looks every second for
// blocked jobs whose key has a slot free or no row), or a slot given
// back does; or, its queue paused, it waits scheduled for the resume, as
// settle's do.
func (s *Store) settleUnwaiting(ctx context.Context, ex Executor, c Clock, hs holders, back []slotless) (stmts []Stmt, instead map[int64]State, left map[int64]bool, queues []string, err error) {
	if len(hs) == 0 && len(back) == 0 {
		return nil, nil, nil, nil, nil
	}
	sl, busy, err := s.lockUnheldSlots(ctx, ex, keysOf(hs, back), c, len(back) > 0)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	instead, left = map[int64]State{}, map[int64]bool{}
	if len(busy) > 0 {
		hs = maps.Clone(hs)
		for id, k := range hs {
			if slices.Contains(busy, k) {
				delete(hs, id)
				left[id] = true
			}
		}
		back = slices.DeleteFunc(slices.Clone(back), func(b slotless) bool {
			if !slices.Contains(busy, b.conc.Key) {
				return false
			}
			instead[b.id] = StateBlocked
			if sl.waits(b.queue, b.conc, false) {
				instead[b.id] = StateScheduled
			}
			return true
		})
	}
	stmts, more, queues, err := sl.settle(ctx, hs, back)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	maps.Copy(instead, more)
	return stmts, instead, left, queues, nil
}

// settle is Store.settle on semaphores already locked.
func (sl *slots) settle(ctx context.Context, hs holders, back []slotless) ([]Stmt, map[int64]State, []string, error) {
	// The slots given back go to the jobs blocked already, first; the
	// jobs coming back take what is left.
	writes, err := sl.giveAll(ctx, hs)
	if err != nil {
		return nil, nil, nil, err
	}
	var took []int64
	var instead map[int64]State
	for _, b := range back {
		state := StateScheduled
		if !sl.waits(b.queue, b.conc, false) {
			if sl.take(b.conc) {
				took = append(took, b.id)
				continue
			}
			state = StateBlocked
		}
		if instead == nil {
			instead = map[int64]State{}
		}
		instead[b.id] = state
	}
	if len(took) > 0 {
		writes = append(writes, stmt(sl.q.MarkSlots(took, true)))
	}
	return append(writes, sl.writes()...), instead, sl.queues, nil
}
