package engine

import (
	"cmp"
	"context"
	"fmt"
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
