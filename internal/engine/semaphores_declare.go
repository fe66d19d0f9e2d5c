package engine

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// SlotDeclaration is a concurrency limit that a worker declares, at its
// start, on the semaphores of the keys it covers.
type SlotDeclaration struct {
	// Scope is the limit's scope (its Group, or its kind): its
	// semaphores are SCOPE and SCOPE/….
	Scope string
	// To and Duration are the limit declared, as an enqueue of the
	// scope's kind declares them.
	To       int
	Duration time.Duration
	// Keys, when not nil, are the only semaphores of the scope to declare
	// on: those an earlier call left busy (Declared.Busy).
	Keys []string
	// Wait, with Keys, declares on each key in a transaction of its own
	// that waits for the key's lock (as an enqueue locks its semaphores,
	// LockSemaphores) instead of skipping it: declarations that wait on a
	// held key land in the order they queued for it, once its holder
	// ends, and the wait holds no other row. Without Keys it does
	// nothing: a walk of the scope waits for no lock.
	Wait bool
	// Batch is how many semaphores one transaction changes at most;
	// DefaultRepriceBatch when 0.
	Batch int
}

// Declared is what DeclareSemaphores did.
type Declared struct {
	// Changed counts the semaphores whose limit it set.
	Changed int
	// Unblocked counts the blocked jobs it handed a slot a raised limit
	// freed.
	Unblocked int
	// Busy are the semaphores, sorted, that another transaction held and
	// that it left as they were, to be declared on again later (with
	// Wait, those whose row was deleted and made again while it waited).
	Busy []string
}

// DeclareSemaphores records a declared limit on the semaphores of its
// scope whose recorded limit differs, as an enqueue of one of their keys
// would: the key's limit is the one most recently declared. Without it a
// key's limit changed only at the next enqueue of that very key, and a
// backlog of blocked jobs kept running under the old To however long it
// took. A lower limit takes no slot from a holder (no new slot is handed
// out until the holders are fewer than it); a raised one hands the slots
// it frees to the key's first blocked jobs at once, as a slot given back
// does (the dispatcher's upkeep would within a tick: MaintainSemaphores).
//
// It works in transactions of at most Batch semaphores, each of which
// finds them without locking them, then locks those no other transaction
// holds, in key order and waiting for none, checks them again and reads
// c's time after its locks. Unless d.Wait, it never waits for a lock: a
// semaphore another transaction holds (an enqueue, a finish, an app's open
// transaction that enqueued a job of the key) is left as it is and
// returned in Busy, for the caller to declare on again, by name (d.Keys),
// waiting for it if it likes (d.Wait). It is idempotent: a semaphore that
// records the limit already is changed by none of it.
func (s *Store) DeclareSemaphores(ctx context.Context, c Clock, d SlotDeclaration) (Declared, error) {
	if d.Batch <= 0 {
		d.Batch = DefaultRepriceBatch
	}
	var out Declared
	add := func(got Declared) {
		out.Changed += got.Changed
		out.Unblocked += got.Unblocked
		out.Busy = append(out.Busy, got.Busy...)
	}
	if d.Keys != nil {
		if d.Wait {
			d.Batch = 1 // a wait holds no other row
		}
		for keys := range slices.Chunk(sortedKeys(d.Keys), d.Batch) {
			_, _, got, err := s.declareBatch(ctx, c, d, "", keys)
			add(got)
			if err != nil {
				return out, s.wrap(fmt.Errorf("declare the concurrency limit of %s: %w", d.Scope, err))
			}
		}
		return out, nil
	}
	after := ""
	for {
		found, last, got, err := s.declareBatch(ctx, c, d, after, nil)
		add(got)
		if err != nil {
			return out, s.wrap(fmt.Errorf("declare the concurrency limit of %s: %w", d.Scope, err))
		}
		if found < d.Batch {
			slices.Sort(out.Busy)
			return out, nil
		}
		after = last
	}
}

// declareBatch is one transaction of DeclareSemaphores: it declares d on
// keys or, when keys is nil, on up to d.Batch semaphores of d's scope
// after after whose limit differs, and returns how many it found, the
// last it found (in the order of the walk) and what it did. It locks the
// semaphores skipping those another transaction holds, or waiting for
// them when it declares on keys with d.Wait.
func (s *Store) declareBatch(ctx context.Context, c Clock, d SlotDeclaration, after string, keys []string) (found int, last string, got Declared, err error) {
	var queues []string
	err = s.inTx(ctx, func(tx Tx) error {
		found, last, got, queues = 0, "", Declared{}, nil
		names := keys
		if names == nil {
			q, args := s.q.ReadUndeclaredSemaphores(d.Scope, after, d.To, d.Duration.Microseconds(), d.Batch)
			var err error
			if names, err = queryStrings(ctx, tx, q, args); err != nil {
				return fmt.Errorf("find semaphores: %w", err)
			}
			if len(names) == 0 {
				return nil
			}
			found, last = len(names), names[len(names)-1]
		}
		sl := s.newSlots(tx)
		lock, what := s.q.LockFreeSemaphores, "lock free semaphores"
		if keys != nil && d.Wait {
			lock, what = s.q.LockSemaphores, "lock semaphores"
		}
		if err := s.lockByName(ctx, tx, sortedKeys(names), lock, nil, nil, nil, sl.has, sl.load, nil); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		at, err := s.now(ctx, tx, c)
		if err != nil {
			return err
		}
		sl.now = Micros(at)
		var raised, busy []string
		for _, k := range sortedKeys(names) {
			r := sl.sems[k]
			switch {
			case r == nil:
				busy = append(busy, k)
			case r.Limit != d.To || r.DurationUS != d.Duration.Microseconds():
				sl.declare(&Conc{Key: k, To: d.To, Duration: d.Duration})
				got.Changed++
				if r.Free() > 0 {
					raised = append(raised, k)
				}
			}
		}
		if got.Busy, err = s.existing(ctx, tx, busy); err != nil {
			return err
		}
		if err := sl.fillBlocked(ctx, raised); err != nil {
			return err
		}
		got.Unblocked, queues = len(sl.handed), sl.queues
		if len(sl.dirty) == 0 {
			return nil
		}
		return pipeline(ctx, tx, sl.writes(), nil)
	})
	if err != nil {
		return 0, "", Declared{}, err
	}
	s.Wake(queues...)
	return found, last, got, nil
}

// existing returns which of keys (sorted) have a row, read without
// locking them: of the semaphores a locking read that skips held rows did
// not find, those another transaction holds (the others were deleted as
// idle since they were found); of those a waiting one did not find, those
// whose row was made again while it waited.
func (s *Store) existing(ctx context.Context, ex Executor, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	q, args := s.q.ExistingSemaphores(keys)
	held, err := queryStrings(ctx, ex, q, args)
	if err != nil {
		return nil, fmt.Errorf("read held semaphores: %w", err)
	}
	return sortedKeys(held), nil
}

// fillBlocked hands the free slots of keys (sorted) to their first
// blocked jobs, reading first, in one statement, which of them have any.
func (sl *slots) fillBlocked(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	q, args := sl.q.BlockedAmong(keys)
	blocked, err := queryStrings(ctx, sl.ex, q, args)
	if err != nil {
		return fmt.Errorf("find blocked jobs: %w", err)
	}
	for _, k := range sortedKeys(blocked) {
		if err := sl.fill(ctx, k); err != nil {
			return err
		}
	}
	return nil
}
