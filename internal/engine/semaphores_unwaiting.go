package engine

import (
	"context"
	"errors"
)

// ErrSemaphoreHeld matches (errors.Is) the error of an enqueue that waits
// for no semaphore (WithoutSlotWaits) and needed one that another
// transaction holds or is creating. Nothing was written: the caller's
// transaction is to roll back, and the enqueue may be tried again later.
var ErrSemaphoreHeld = errors.New("a concurrency key's semaphore is held by another transaction")

// Is makes a heldSemaphores error match ErrSemaphoreHeld.
func (h heldSemaphores) Is(target error) bool { return target == ErrSemaphoreHeld }

// unwaitingSlotsKey is the context key WithoutSlotWaits sets.
type unwaitingSlotsKey struct{}

// WithoutSlotWaits returns ctx for an enqueue that waits for no semaphore
// another transaction holds: where it would (a transaction of the app's
// that enqueued a job of the key with EnqueueTx and is still open), the
// enqueue fails with ErrSemaphoreHeld instead. The dispatcher's recurring
// tasks enqueue this way, inline in its round, which would otherwise wait
// for the app's transaction, and with it every promotion and task.
func WithoutSlotWaits(ctx context.Context) context.Context {
	return context.WithValue(ctx, unwaitingSlotsKey{}, true)
}

// waitsForSlots reports whether an enqueue under ctx may wait for a
// semaphore another transaction holds (not under WithoutSlotWaits).
func waitsForSlots(ctx context.Context) bool {
	v, _ := ctx.Value(unwaitingSlotsKey{}).(bool)
	return !v
}

// lockSlotsUnwaiting is lockSlotsSeeing for an enqueue under
// WithoutSlotWaits: it locks the semaphores of keys that no other
// transaction holds (lockUnheldSlots: in key order, waiting for none),
// creates the missing rows without waiting for a transaction creating
// them too (createUnwaiting), and fails with heldSemaphores, which
// matches ErrSemaphoreHeld, naming the keys it could not lock. Where a
// transaction holds the only write lock it is lockSlotsSeeing.
func (s *Store) lockSlotsUnwaiting(ctx context.Context, ex Executor, keys []string, c Clock, paused bool) (*slots, error) {
	sl, busy, err := s.lockUnheldSlots(ctx, ex, keys, c, paused)
	if err != nil || len(busy) == 0 {
		return sl, err
	}
	if busy, err = s.createUnwaiting(ctx, ex, sl, busy); err != nil {
		return nil, err
	}
	if len(busy) > 0 {
		return nil, heldSemaphores(busy)
	}
	return sl, nil
}
