package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// lockSlots locks the semaphores of keys in key order, creating the
// missing rows, and then reads c's time, which stamps the slots' activity:
// with DatabaseTime, the database's clock, after the locks (in the same
// round trip where the database can). A caller that already decided on a
// time passes At(it).
//
// Where rows are locked one by one, the rows the keys lack are created,
// and those they have locked, by one insert in key order, before
// LockSemaphores reads them (createThenLock): a transaction that created
// k/a while it held k/c could wait for another that is creating k/a too
// and waits, in key order, for k/c. An enqueue may run in the
// caller's own transaction, which the store cannot run again, so the rows
// are created inside the transaction, as budgets' cannot be
// (missingBudgets), at the cost of one more statement in the round trip.
func (s *Store) lockSlots(ctx context.Context, ex Executor, keys []string, c Clock) (*slots, error) {
	return s.lockSlotsSeeing(ctx, ex, keys, c, false)
}

// lockSlotsSeeing is lockSlots that, with paused, also reads which queues
// are paused (slots.paused), in the same round trip where the database
// can, for an enqueue that gives no slot to a paused queue's job.
func (s *Store) lockSlotsSeeing(ctx context.Context, ex Executor, keys []string, c Clock, paused bool) (*slots, error) {
	keys = sortedKeys(keys)
	sl := s.newSlots(ex)
	var after []Stmt
	clockAt := -1
	if s.readsDatabase(c) {
		clockAt = len(after)
		after = append(after, query(s.d.Now(), nil))
	}
	if paused {
		after = sl.seePaused(s.q, after)
	}
	var dbNow int64
	readAfter := func(i int, rows Rows) error {
		if i == clockAt {
			return rows.Scan(&dbNow)
		}
		return sl.loadPaused(i, rows)
	}
	var err error
	if s.d.Capabilities().RowLocks {
		err = s.createThenLock(ctx, ex, keys, after, sl.load, readAfter)
	} else {
		err = s.lockByName(ctx, ex, keys, s.q.LockSemaphores, s.q.InsertSemaphores, nil, after, sl.has, sl.load, readAfter)
	}
	if err != nil {
		return nil, fmt.Errorf("lock semaphores: %w", err)
	}
	for _, k := range keys {
		if sl.sems[k] == nil {
			sl.sems[k] = &SemaphoreRow{Name: k}
		}
	}
	sl.now = Micros(c.Host())
	if clockAt >= 0 {
		sl.now = dbNow
	}
	return sl, nil
}

// newSlots returns an empty view of semaphores locked through ex.
func (s *Store) newSlots(ex Executor) *slots {
	return &slots{ex: ex, q: s.q, sems: map[string]*SemaphoreRow{}, dirty: map[string]bool{}}
}

// load reads one locked semaphore row into the view.
func (sl *slots) load(rows Rows) error {
	r, err := scanSemaphore(rows)
	if err == nil {
		sl.sems[r.Name] = &r
	}
	return err
}

// seePaused asks for the paused queues with the locks: it returns after
// with the statement that reads them, whose rows loadPaused reads.
func (sl *slots) seePaused(q *SQL, after []Stmt) []Stmt {
	sl.paused = map[string]bool{}
	return append(after, query(q.PausedQueues(), nil))
}

// loadPaused reads one paused queue into the view.
func (sl *slots) loadPaused(_ int, rows Rows) error {
	var queue string
	if err := rows.Scan(&queue); err != nil {
		return err
	}
	sl.paused[queue] = true
	return nil
}

// has says whether the view holds key's row.
func (sl *slots) has(key string) bool { return sl.sems[key] != nil }

// sortedKeys returns keys sorted, without repeats.
func sortedKeys(keys []string) []string {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	return slices.Compact(keys)
}

// lockFreeSlots locks the semaphores of keys as lockSlots does, stamping
// their activity at at, but waits for none: it reports heldSemaphores
// naming the keys another transaction holds (or that have no row). A claim
// gives slots back this way, after it has locked its budgets: semaphores
// are locked before budgets everywhere else, so waiting for one here could
// deadlock with a transaction that holds it and waits for a budget, or
// with one holding a key that sorts before one the claim's promotion
// locked. Where a transaction holds the only write lock it is lockSlots.
func (s *Store) lockFreeSlots(ctx context.Context, ex Executor, keys []string, at time.Time) (*slots, error) {
	sl, busy, err := s.lockUnheldSlots(ctx, ex, keys, At(at), false)
	if err != nil {
		return nil, err
	}
	if len(busy) > 0 {
		return nil, heldSemaphores(busy)
	}
	return sl, nil
}

// lockUnheldSlots locks the semaphores of keys that no other transaction
// holds, as lockSlots does but waiting for none, and then reads c's time,
// which stamps their activity (the database's clock, after the locks, in
// the same round trip where the database can; a caller that decided on a
// time passes At(it)). It returns the others, sorted: the keys another
// transaction holds, or that have no row (it creates none, as creating
// one may wait for a transaction creating it too). With paused it reads
// the paused queues with the locks, as lockSlotsSeeing does. Where a
// transaction holds the only write lock it is lockSlotsSeeing, and every
// key is locked.
func (s *Store) lockUnheldSlots(ctx context.Context, ex Executor, keys []string, c Clock, paused bool) (*slots, []string, error) {
	if !s.d.Capabilities().RowLocks {
		sl, err := s.lockSlotsSeeing(ctx, ex, keys, c, paused)
		return sl, nil, err
	}
	keys = sortedKeys(keys)
	sl := s.newSlots(ex)
	var after []Stmt
	clockAt := -1
	if s.readsDatabase(c) && len(keys) > 0 {
		clockAt = len(after)
		after = append(after, query(s.d.Now(), nil))
	}
	if paused {
		after = sl.seePaused(s.q, after)
	}
	var dbNow int64
	readAfter := func(i int, rows Rows) error {
		if i == clockAt {
			return rows.Scan(&dbNow)
		}
		return sl.loadPaused(i, rows)
	}
	if err := s.lockByName(ctx, ex, keys, s.q.LockFreeSemaphores, nil, nil, after, sl.has, sl.load, readAfter); err != nil {
		return nil, nil, fmt.Errorf("lock free semaphores: %w", err)
	}
	var busy []string
	for _, k := range keys {
		if !sl.has(k) {
			busy = append(busy, k)
		}
	}
	sl.now = Micros(c.Host())
	if clockAt >= 0 {
		sl.now = dbNow
	}
	return sl, busy, nil
}

// lockDueSlots locks the semaphores a promotion needs: those of also (a
// claim's slotHint) first, waiting for them as lockSlots does, then those
// of keys that no other transaction holds or is creating, waiting for
// none, and returns the other keys, sorted. A promotion leaves the due
// jobs of those keys due, for a later one, and promotes the rest at once:
// a key's semaphore is held until commit by the transaction of every
// enqueue of the key, an app's own too (EnqueueTx), and waiting for it
// would hold every due job of the batch, the unlimited ones too, and the
// rest of the dispatcher's tick or of a worker's claim, as long as the
// app's transaction stays open. A row that no read finds is made, without
// waiting for a transaction that is making it too (createUnwaiting).
// at stamps the slots' activity. Where a transaction holds the only write
// lock it is lockSlots, and every key is locked.
func (s *Store) lockDueSlots(ctx context.Context, ex Executor, keys, also []string, at time.Time) (*slots, []string, error) {
	if !s.d.Capabilities().RowLocks {
		sl, err := s.lockSlots(ctx, ex, append(slices.Clone(also), keys...), At(at))
		return sl, nil, err
	}
	sl := s.newSlots(ex)
	if len(also) > 0 {
		var err error
		if sl, err = s.lockSlots(ctx, ex, also, At(at)); err != nil {
			return nil, nil, err
		}
	}
	rest := slices.DeleteFunc(sortedKeys(keys), sl.has)
	if len(rest) > 0 {
		if err := s.lockByName(ctx, ex, rest, s.q.LockFreeSemaphores, nil, nil, nil, sl.has, sl.load, nil); err != nil {
			return nil, nil, fmt.Errorf("lock free semaphores: %w", err)
		}
		rest = slices.DeleteFunc(rest, sl.has)
	}
	var busy []string
	if len(rest) > 0 {
		var err error
		if busy, err = s.createUnwaiting(ctx, ex, sl, rest); err != nil {
			return nil, nil, err
		}
	}
	sl.now = Micros(at)
	return sl, busy, nil
}

// createUnwaiting sorts keys (sorted), which no locking read that skips
// held rows found, into those another transaction holds (a read finds
// their rows) or is creating, which it returns, and those that have no
// row, which it creates and locks into sl, waiting for no other
// transaction (tryCreate). A batch of keys of which one could not be
// created at once is tried again key by key, so that one key's creator
// holds back no other key.
func (s *Store) createUnwaiting(ctx context.Context, ex Executor, sl *slots, keys []string) ([]string, error) {
	busy, err := s.existing(ctx, ex, keys)
	if err != nil {
		return nil, err
	}
	missing := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return slices.Contains(busy, k) })
	if len(missing) == 0 {
		return sortedKeys(busy), nil
	}
	made, err := s.tryCreate(ctx, ex, sl, missing)
	if err != nil || made {
		return sortedKeys(busy), err
	}
	if len(missing) == 1 {
		return sortedKeys(append(busy, missing...)), nil
	}
	for _, k := range missing {
		made, err := s.tryCreate(ctx, ex, sl, []string{k})
		if err != nil {
			return nil, err
		}
		if !made {
			busy = append(busy, k)
		}
	}
	return sortedKeys(busy), nil
}

// tryCreate creates the semaphore rows of keys, which a read found none
// of, and locks them into sl, unless another transaction holds one or is
// creating one, and reports whether it did. It waits for no other
// transaction: where a locking read sees a row being inserted (MySQL) it
// first probes the keys with one that fails at once (ProbeSemaphores);
// elsewhere (PostgreSQL) it bounds the insert's lock waits to a moment,
// in a savepoint it rolls back when one runs out (ShortLockWait); the
// rollback undoes the setting too, and a savepoint kept sets back the
// bound the transaction had (RestoreLockWait), which may be the app's. A
// database with neither creates them as lockSlots does, waiting.
func (s *Store) tryCreate(ctx context.Context, ex Executor, sl *slots, keys []string) (bool, error) {
	switch {
	case s.q.probeSemaphores != nil:
		q, args := s.q.ProbeSemaphores(keys)
		if _, err := queryStrings(ctx, ex, q, args); err != nil {
			if s.retryable(err) {
				return false, nil
			}
			return false, fmt.Errorf("probe semaphores: %w", err)
		}
	case s.q.ShortLockWait() != "":
		// The savepoint is a mark's (MarkTx), set in the pipeline to save
		// a round trip.
		m := Mark{s: s, ex: ex, n: s.marks.Add(1)}
		stmts := []Stmt{stmt(m.named(s.q.savepoint), nil), stmt(s.q.ShortLockWait(), nil), stmt(s.q.InsertSemaphores(keys)),
			query(s.q.LockSemaphores(keys)), stmt(s.q.RestoreLockWait(), nil), stmt(m.named(s.q.releaseSavepoint), nil)}
		if err := pipeline(ctx, ex, stmts, readLocked(3, sl.load, nil)); err != nil {
			if !s.retryable(err) {
				return false, fmt.Errorf("create semaphores: %w", err)
			}
			for _, k := range keys {
				delete(sl.sems, k)
			}
			if err := m.Undo(ctx); err != nil {
				return false, fmt.Errorf("create semaphores: %w", err)
			}
			return false, nil
		}
		return true, nil
	}
	if err := s.createThenLock(ctx, ex, keys, nil, sl.load, nil); err != nil {
		return false, fmt.Errorf("create semaphores: %w", err)
	}
	return true, nil
}

// heldSemaphores are semaphores a claim needed after locking its budgets
// and could not lock without waiting. The claim runs again, locking them
// first (ClaimParams.slotHint).
type heldSemaphores []string

func (h heldSemaphores) Error() string {
	return fmt.Sprintf("semaphores %s are held by another transaction", strings.Join(h, ", "))
}

// createThenLock creates the semaphore rows keys (sorted) lack and then
// locks them all, in key order, and runs the after statements, in one
// round trip where the database can. The insert locks the rows that exist
// as it goes, in key order too (so the hourly clean-up, which deletes idle
// rows, cannot delete one between the insert and the lock: see
// InsertSemaphores), and waits only for a transaction that holds one of
// these rows: one that took it in key order too, so it holds none of the
// rows this call took before it. More keys than a statement binds go in
// sorted runs (keyRuns), the after statements with the last.
func (s *Store) createThenLock(ctx context.Context, ex Executor, keys []string, after []Stmt, scan func(Rows) error, scanAfter func(int, Rows) error) error {
	for run, last := range s.keyRuns(keys) {
		stmts := []Stmt{stmt(s.q.InsertSemaphores(run)), query(s.q.LockSemaphores(run))}
		if last {
			stmts = append(stmts, after...)
		}
		if err := pipeline(ctx, ex, stmts, readLocked(1, scan, scanAfter)); err != nil {
			return err
		}
	}
	return nil
}

func scanSemaphore(rows Rows, extra ...any) (SemaphoreRow, error) {
	var r SemaphoreRow
	err := rows.Scan(append([]any{&r.Name, &r.Held, &r.Limit, &r.DurationUS, &r.ExpiresAt, &r.UpdatedAt}, extra...)...)
	return r, err
}
