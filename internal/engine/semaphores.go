package engine

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicequeue/sluice/concurrency"
)

// DiscardedError is recorded on a job a concurrency limit discarded.
const DiscardedError = "discarded: no concurrency slot free"

// slots is one transaction's view of the semaphores it locked. It applies
// concurrency.Semaphore's rules to the rows: it takes slots for jobs
// becoming ready, gives slots back and then hands whatever is free to the
// first blocked jobs of the key.
type slots struct {
	ex     Executor
	q      *SQL
	now    int64
	sems   map[string]*SemaphoreRow
	dirty  map[string]bool
	handed []int64  // blocked jobs given a slot: ready now
	queues []string // their queues, to wake
	// paused are the queues paused as the semaphores were locked, when
	// the caller asked (lockSlotsSeeing): a job of one takes no slot.
	paused map[string]bool
	// unheld counts gives of slots the row did not count as held, which
	// the holds_slot flags are there to prevent; a model test asserts it
	// stays 0.
	unheld int
}

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

// apply runs one of concurrency.Semaphore's rules on a key's row and marks
// it for saving.
func (sl *slots) apply(key string, rule func(*concurrency.Semaphore)) {
	r := sl.sems[key]
	sem := concurrency.Semaphore{Held: r.Held, To: r.Limit}
	rule(&sem)
	r.Held, r.Limit = sem.Held, sem.To
	sl.dirty[key] = true
}

// touch stamps a key's activity: its slots are presumed lost only after
// Duration without any.
func (sl *slots) touch(key string) {
	r := sl.sems[key]
	r.ExpiresAt = sl.now + r.DurationUS
	sl.dirty[key] = true
}

// declare records the limit an enqueue declares (To and Duration): the
// key's limit is the one most recently declared. Only an enqueue declares
// (enqueueTx), a delayed job's too, and a worker's start
// (DeclareSemaphores); a job that becomes ready again takes its slot
// under the key's limit as it stands (take).
func (sl *slots) declare(c *Conc) {
	sl.apply(c.Key, func(s *concurrency.Semaphore) { s.Declare(c.To) })
	sl.sems[c.Key].DurationUS = c.Duration.Microseconds()
}

// enqueue declares the limit of a job enqueued ready, and gives it a slot
// if one of its key's is free under that limit.
func (sl *slots) enqueue(c *Conc) bool {
	sl.declare(c)
	return sl.take(c)
}

// waits reports whether a job of queue that would take a slot of c's key
// (it needs one and holds none) is to wait for its queue's resume
// instead: the queue is paused, as read when the semaphores were locked
// (lockSlotsSeeing). A paused queue's job takes no slot, which another
// queue's job of its key would then wait for while it cannot run.
func (sl *slots) waits(queue string, c *Conc, holds bool) bool {
	return sl != nil && c != nil && !holds && sl.paused[queue]
}

// take gives a job a slot if one of its key's is free, under the key's
// limit as last declared, not the To stored on the job: a job that comes
// back (promoted from a delay, a deferral or a 429, released, recovered,
// retried by an operator) was enqueued under the To of its time, and a
// later enqueue may have lowered it, which a returning job must not undo.
// A key with no limit declared (its row was just created: the row was
// deleted meanwhile, or the job was enqueued delayed by a version that
// declared limits only as jobs became ready) takes the job's To, the best
// declaration there is.
func (sl *slots) take(c *Conc) bool {
	if sl.sems[c.Key].Limit <= 0 {
		sl.declare(c)
	}
	took := false
	sl.apply(c.Key, func(s *concurrency.Semaphore) { took = s.Take() })
	if took {
		sl.touch(c.Key)
	}
	return took
}

// give takes back n slots of key from jobs that held them, then hands the
// free slots to the key's first blocked jobs.
func (sl *slots) give(ctx context.Context, key string, n int) error {
	sl.apply(key, func(s *concurrency.Semaphore) {
		for range n {
			if !s.Give() {
				sl.unheld++
			}
		}
	})
	sl.touch(key)
	return sl.fill(ctx, key)
}

// expire frees the n slots of key that its lost running holders held:
// they lose their slots in the same transaction, so that one finishing
// later gives nothing back. Its other holders, ready or scheduled, or
// running but claimed less than Duration ago, are not lost and keep
// theirs. It stamps the key's activity, so that a key whose holders all
// wait is looked at again only after another Duration; but when a running
// holder kept its slot only because it was claimed recently, the key
// expires as that holder's run reaches Duration (next, its claim time
// plus Duration, 0 for none), so that it is presumed lost then and no
// later.
func (sl *slots) expire(key string, n int, next int64) {
	sl.apply(key, func(s *concurrency.Semaphore) {
		for range n {
			if !s.Give() {
				sl.unheld++
			}
		}
	})
	sl.touch(key)
	if r := sl.sems[key]; next > 0 && next < r.ExpiresAt {
		r.ExpiresAt = next
	}
}

// fill hands a key's free slots to its first blocked jobs. A key with no
// limit declared (its row was just created: the blocked jobs' row was
// lost) takes the limit of its first blocked job, as take does with a job
// that comes back: under a limit of 0 nothing would be handed out, and
// the dispatcher would never look at the key again.
func (sl *slots) fill(ctx context.Context, key string) error {
	if sl.sems[key].Limit <= 0 {
		if err := sl.declareBlocked(ctx, key); err != nil {
			return err
		}
	}
	free := concurrency.Semaphore{Held: sl.sems[key].Held, To: sl.sems[key].Limit}.Free()
	if free == 0 {
		return nil
	}
	ids, err := sl.lockBlocked(ctx, key, free)
	if err != nil || len(ids) == 0 {
		return err
	}
	sl.apply(key, func(s *concurrency.Semaphore) {
		for range ids {
			s.Take()
		}
	})
	sl.touch(key)
	sl.handed = append(sl.handed, ids...)
	return nil
}

// declareBlocked declares for key the limit its first blocked job (of a
// queue not paused) was enqueued under, if it has one.
func (sl *slots) declareBlocked(ctx context.Context, key string) error {
	q, args := sl.q.BlockedLimit(key)
	rows, err := sl.ex.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("read the limit of %s's blocked jobs: %w", key, err)
	}
	defer rows.Close()
	if rows.Next() {
		var to int
		var duration int64
		if err := rows.Scan(&to, &duration); err != nil {
			return fmt.Errorf("read the limit of %s's blocked jobs: %w", key, err)
		}
		sl.declare(&Conc{Key: key, To: to, Duration: time.Duration(duration) * time.Microsecond})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the limit of %s's blocked jobs: %w", key, err)
	}
	return nil
}

// lockBlocked locks up to n of key's first blocked jobs, noting their
// queues: the first n by priority and id, except that each fair one's
// slot goes to the fair job of its priority with the lowest virtual start
// (then id), so fair jobs take the slots they would by id, and among
// them, the keys' turns go in fair order (docs/fairness.md).
func (sl *slots) lockBlocked(ctx context.Context, key string, n int) ([]int64, error) {
	q, args := sl.q.LockBlocked(key, n)
	rows, err := sl.ex.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("lock blocked jobs of %s: %w", key, err)
	}
	defer rows.Close()
	type blocked struct {
		id              int64
		queue           string
		priority, start int64
		fair            bool
	}
	type level struct {
		queue    string
		priority int64
	}
	var first []blocked
	fair := map[level][]blocked{} // by level, in fair order
	for rows.Next() {
		var b blocked
		var isFair, stream int64
		if err := rows.Scan(&b.id, &b.queue, &b.priority, &isFair, &b.start, &stream); err != nil {
			return nil, err
		}
		b.fair = isFair != 0
		if stream == 0 {
			first = append(first, b)
		} else {
			l := level{b.queue, b.priority}
			fair[l] = append(fair[l], b)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// A union's rows need not come in either read's order.
	slices.SortStableFunc(first, func(a, b blocked) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.id, b.id))
	})
	for _, bs := range fair {
		slices.SortStableFunc(bs, func(a, b blocked) int {
			return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.id, b.id))
		})
	}
	taken := make(map[int64]bool, len(first))
	var ids []int64
	for _, b := range first {
		if b.fair {
			// The fair job of its level with the lowest start; itself
			// when the fair read found none left (rows another
			// transaction locked in between, or past its limit).
			l := level{b.queue, b.priority}
			for len(fair[l]) > 0 {
				next := fair[l][0]
				fair[l] = fair[l][1:]
				if !taken[next.id] {
					b = next
					break
				}
			}
		}
		if taken[b.id] {
			continue
		}
		taken[b.id] = true
		ids = append(ids, b.id)
		if !slices.Contains(sl.queues, b.queue) {
			sl.queues = append(sl.queues, b.queue)
		}
	}
	return ids, nil
}

// writes returns the statements that save the changed semaphores and
// make the jobs handed a slot ready.
func (sl *slots) writes() []Stmt {
	var out []Stmt
	var rows []SemaphoreRow
	for k := range sl.dirty {
		r := *sl.sems[k]
		r.UpdatedAt = sl.now
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b SemaphoreRow) int { return strings.Compare(a.Name, b.Name) })
	// In runs a statement binds (an EnqueueMany may bring tens of
	// thousands of keys; SQLite binds 32,766 parameters).
	for run := range slices.Chunk(rows, sl.q.c.MaxInsertBatch) {
		out = append(out, stmt(sl.q.SaveSemaphores(run)))
	}
	if len(sl.handed) > 0 {
		for ids := range slices.Chunk(sl.handed, sl.q.c.MaxInsertBatch) {
			ready := make([]SetRow, len(ids))
			for i, id := range ids {
				ready[i] = SetRow{ID: id, State: StateReady, RunAt: sl.now}
			}
			out = append(out, stmt(sl.q.SetJobs(StateBlocked, 0, sl.now, ready)), stmt(sl.q.MarkSlots(ids, true)))
		}
		if q, args := sl.q.Notify(sl.queues); q != "" {
			out = append(out, stmt(q, args))
		}
	}
	return out
}

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

// SemaphoreInfo is a key's semaphore and the jobs on it.
type SemaphoreInfo struct {
	SemaphoreRow
	// Blocked counts jobs waiting for a slot; Holding those holding one.
	Blocked, Holding int
}

func queryStrings(ctx context.Context, ex Executor, q string, args []any) ([]string, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Free returns how many of the key's slots may be handed out now.
func (r SemaphoreRow) Free() int {
	return concurrency.Semaphore{Held: r.Held, To: r.Limit}.Free()
}
