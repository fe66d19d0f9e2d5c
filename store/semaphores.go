package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// DiscardedError is recorded on a job a concurrency limit discarded.
const DiscardedError = "discarded: no concurrency slot free"

// slots is one transaction's view of the semaphores it locked: it takes
// slots for jobs becoming ready and gives slots back, handing each to the
// first blocked job of its key before counting it free.
type slots struct {
	ex     Executor
	d      Dialect
	now    int64
	sems   map[string]*SemaphoreRow
	dirty  map[string]bool
	handed []int64  // blocked jobs given a slot: ready now
	queues []string // their queues, to wake
}

// lockSlots locks the semaphores of keys in key order, creating the
// missing rows.
func (s *Store) lockSlots(ctx context.Context, ex Executor, keys []string, now int64) (*slots, error) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	sl := &slots{ex: ex, d: s.d, now: now, sems: map[string]*SemaphoreRow{}, dirty: map[string]bool{}}
	err := s.lockByName(ctx, ex, keys, s.d.LockSemaphores, s.d.InsertSemaphores, nil,
		func(k string) bool { return sl.sems[k] != nil },
		func(rows Rows) error {
			var r SemaphoreRow
			if err := rows.Scan(&r.Name, &r.Value, &r.Limit, &r.DurationUS, &r.ExpiresAt, &r.UpdatedAt); err != nil {
				return err
			}
			sl.sems[r.Name] = &r
			return nil
		}, nil)
	if err != nil {
		return nil, fmt.Errorf("lock semaphores: %w", err)
	}
	for _, k := range keys {
		if sl.sems[k] == nil {
			sl.sems[k] = &SemaphoreRow{Name: k}
		}
	}
	return sl, nil
}

// declare applies the limit a job declares: a new row starts with every
// slot free, and a changed To moves the free count by the difference.
func (sl *slots) declare(c *Conc) *SemaphoreRow {
	sem := sl.sems[c.Key]
	if sem.Limit != c.To {
		free := c.To
		if sem.Limit > 0 {
			free = sem.Value + c.To - sem.Limit
		}
		sem.Value, sem.Limit = min(max(free, 0), c.To), c.To
	}
	sem.DurationUS = c.Duration.Microseconds()
	sl.dirty[c.Key] = true
	return sem
}

// take gives the job a slot if one of its key's is free.
func (sl *slots) take(c *Conc) bool {
	sem := sl.declare(c)
	if sem.Value == 0 {
		return false
	}
	sem.Value--
	sem.ExpiresAt = sl.now + sem.DurationUS
	return true
}

// give returns n slots of key: to its first blocked jobs, and the rest to
// the free count, never above To.
func (sl *slots) give(ctx context.Context, key string, n int) error {
	sem := sl.sems[key]
	handed, err := sl.hand(ctx, key, n)
	if err != nil {
		return err
	}
	sem.Value = min(sem.Value+n-handed, max(sem.Limit, 0))
	sem.ExpiresAt = sl.now + sem.DurationUS
	sl.dirty[key] = true
	return nil
}

// fill hands a key's free slots to its blocked jobs.
func (sl *slots) fill(ctx context.Context, key string) error {
	sem := sl.sems[key]
	if sem.Value <= 0 {
		return nil
	}
	handed, err := sl.hand(ctx, key, sem.Value)
	if err != nil || handed == 0 {
		return err
	}
	sem.Value -= handed
	sem.ExpiresAt = sl.now + sem.DurationUS
	sl.dirty[key] = true
	return nil
}

// hand gives up to n slots of key to its first blocked jobs and returns
// how many took one.
func (sl *slots) hand(ctx context.Context, key string, n int) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	q, args := sl.d.LockBlocked(key, n)
	rows, err := sl.ex.Query(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("lock blocked jobs of %s: %w", key, err)
	}
	defer rows.Close()
	handed := 0
	for rows.Next() {
		var id int64
		var queue string
		if err := rows.Scan(&id, &queue); err != nil {
			return 0, err
		}
		sl.handed = append(sl.handed, id)
		if !slices.Contains(sl.queues, queue) {
			sl.queues = append(sl.queues, queue)
		}
		handed++
	}
	return handed, rows.Err()
}

// writes returns the statements that save the changed semaphores and make
// the jobs handed a slot ready.
func (sl *slots) writes() []Stmt {
	var rows []SemaphoreRow
	for k := range sl.dirty {
		r := *sl.sems[k]
		r.UpdatedAt = sl.now
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b SemaphoreRow) int { return strings.Compare(a.Name, b.Name) })
	var out []Stmt
	if len(rows) > 0 {
		out = append(out, stmt(sl.d.SaveSemaphores(rows)))
	}
	if len(sl.handed) > 0 {
		ready := make([]SetRow, len(sl.handed))
		for i, id := range sl.handed {
			ready[i] = SetRow{ID: id, State: StateReady, RunAt: sl.now}
		}
		out = append(out, stmt(sl.d.SetJobs(StateBlocked, 0, sl.now, ready)), stmt(sl.d.MarkSlots(sl.handed, true)))
		if q, args := sl.d.Notify(sl.queues); q != "" {
			out = append(out, stmt(q, args))
		}
	}
	return out
}

// holders are jobs that hold a slot, by id, with their keys.
type holders map[int64]string

// lockHolders locks, of ids, the jobs that hold a slot (and run for
// processID when it is not 0).
func (s *Store) lockHolders(ctx context.Context, ex Executor, ids []int64, processID int64) (holders, error) {
	out := holders{}
	if len(ids) == 0 {
		return out, nil
	}
	q, args := s.d.LockSlotHolders(ids, processID)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("lock slot holders: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var key string
		if err := rows.Scan(&id, &key); err != nil {
			return nil, err
		}
		out[id] = key
	}
	return out, rows.Err()
}

// giveBack returns the slots of jobs that no longer need them, clearing
// their holds_slot, and returns the statements that finish the job and the
// queues whose blocked jobs became ready.
func (s *Store) giveBack(ctx context.Context, ex Executor, now int64, hs holders) ([]Stmt, []string, error) {
	if len(hs) == 0 {
		return nil, nil, nil
	}
	count := map[string]int{}
	ids := make([]int64, 0, len(hs))
	for id, key := range hs {
		count[key]++
		ids = append(ids, id)
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Sort(ids)
	sl, err := s.lockSlots(ctx, ex, keys, now)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range keys {
		if err := sl.give(ctx, k, count[k]); err != nil {
			return nil, nil, err
		}
	}
	return append([]Stmt{stmt(s.d.MarkSlots(ids, false))}, sl.writes()...), sl.queues, nil
}

// MaintainSemaphores frees the slots of keys that saw no activity for
// their Duration (their holders are presumed lost) and hands free slots to
// blocked jobs wherever a key has both, up to limit keys each. It returns
// how many keys it freed and how many blocked jobs became ready. The
// dispatcher runs it every tick.
func (s *Store) MaintainSemaphores(ctx context.Context, now time.Time, limit int) (freed, unblocked int, err error) {
	nowUS := Micros(now)
	var queues []string
	err = s.inTx(ctx, func(tx Tx) error {
		freed, unblocked, queues = 0, 0, nil
		q, args := s.d.LockExpiredSemaphores(nowUS, limit)
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("lock expired semaphores: %w", err)
		}
		var expired []string
		for rows.Next() {
			var r SemaphoreRow
			if err := rows.Scan(&r.Name, &r.Value, &r.Limit, &r.DurationUS, &r.ExpiresAt, &r.UpdatedAt); err != nil {
				rows.Close()
				return err
			}
			expired = append(expired, r.Name)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		q, args = s.d.BlockedKeys(limit)
		keys, err := queryStrings(ctx, tx, q, args)
		if err != nil {
			return fmt.Errorf("find blocked keys: %w", err)
		}
		keys = append(keys, expired...)
		if len(keys) == 0 {
			return nil
		}
		sl, err := s.lockSlots(ctx, tx, keys, nowUS)
		if err != nil {
			return err
		}
		for _, k := range expired {
			sem := sl.sems[k]
			sem.Value = sem.Limit
			sl.dirty[k] = true
		}
		for k := range sl.sems {
			if err := sl.fill(ctx, k); err != nil {
				return err
			}
		}
		freed, unblocked, queues = len(expired), len(sl.handed), sl.queues
		return pipeline(ctx, tx, sl.writes(), nil)
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

// ListSemaphores lists every concurrency key with its slots and jobs.
func (s *Store) ListSemaphores(ctx context.Context) ([]SemaphoreInfo, error) {
	rows, err := s.db.Query(ctx, s.d.ListSemaphores())
	if err != nil {
		return nil, s.wrap(fmt.Errorf("list semaphores: %w", err))
	}
	defer rows.Close()
	var out []SemaphoreInfo
	for rows.Next() {
		var i SemaphoreInfo
		if err := rows.Scan(&i.Name, &i.Value, &i.Limit, &i.DurationUS, &i.ExpiresAt, &i.UpdatedAt, &i.Blocked, &i.Holding); err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, rows.Err()
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
