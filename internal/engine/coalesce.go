package engine

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/coalesce"
)

// maxCoalesceRounds bounds how many times one call looks for the pending
// job of its key again after losing a race to create it.
const maxCoalesceRounds = 5

// enqueueTx enqueues jobs of which some coalesce, need concurrency slots
// or are fair, in one transaction (the caller's, or one of the store's).
// Locks are taken in one order everywhere: the fairness keys (by queue and
// key), the coalesce keys' rows (lockCoalesceKeys), the pending
// jobs calls join (by key), then the semaphores (by
// key), all of them at once: those of the jobs enqueued (each declares its
// limit; those ready on arrival take a slot), of the full jobs their
// calls dispatch, and of the ready jobs a debounce sends back to wait,
// which give their slots back. Blocked jobs given a slot are locked last,
// skipping those another transaction holds (LockBlocked), as every
// transaction that hands out slots does: claims, completions, promotions
// and the dispatcher wait for no pending job while they hold a semaphore,
// so an enqueue waiting for a semaphore while it holds pending jobs
// cannot close a cycle. A job of a paused queue takes no slot: one ready
// on arrival, or dispatched, waits scheduled, due at once, for the resume,
// when the dispatcher promotes it (LockDue). It changes rows (states,
// slots, coalesce keys): a transaction that is retried passes fresh
// copies.
func (s *Store) enqueueTx(ctx context.Context, ex Executor, c Clock, jobs []NewJob, rows []InsertRow) ([]Enqueued, error) {
	weights := make([]int, len(jobs))
	for i, j := range jobs {
		weights[i] = j.FairWeight
	}
	fair, err := s.tagFair(ctx, ex, rows, weights)
	if err != nil {
		return nil, err
	}
	now := c.Host()
	nowUS := Micros(now)
	out := make([]Enqueued, len(rows))
	created := map[int]bool{}
	alone := map[int]bool{} // coalescing calls inserted as plain jobs
	plainRow := func(i int) bool { return jobs[i].Coalesce == nil || alone[i] }
	var dispatched []DueRow
	var dispatchedAt []int
	unslotted := holders{} // ready jobs a debounce sent back to wait
	var order []int
	for i, j := range jobs {
		if j.Coalesce != nil {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(jobs[a].Coalesce.Key, jobs[b].Coalesce.Key) })
	pointers, err := s.lockCoalesceKeys(ctx, ex, jobs, order)
	if err != nil {
		return nil, err
	}
	repointed := map[string]bool{}
	for _, i := range order {
		co, err := s.coalesceOne(ctx, ex, now, jobs[i], &rows[i], pointers)
		if err != nil {
			return nil, err
		}
		if co.created {
			pointers[jobs[i].Coalesce.Key], repointed[jobs[i].Coalesce.Key] = co.ID, true
		}
		out[i], created[i] = co.Enqueued, co.created
		if co.alone {
			alone[i] = true
		}
		if co.dispatch != nil {
			dispatched, dispatchedAt = append(dispatched, *co.dispatch), append(dispatchedAt, i)
		}
		if co.unslotted != nil {
			unslotted[co.unslotted.ID] = co.unslotted.Conc.Key
		}
	}

	// Slots given back by the jobs a debounce sent back to wait, for the
	// full jobs calls dispatched, and for the jobs that are ready on
	// arrival: plain ones (and calls that could not join the pending job
	// of their key) before they are inserted, coalescing ones just
	// created. Every job enqueued (not a call that joined a pending job)
	// declares its limit, a delayed one too.
	dispatchKeys := slotKeys(dispatched)
	keys := append(slices.Clone(dispatchKeys), keysOf(unslotted, nil)...)
	declares := func(i int) bool {
		return rows[i].ConcKey != "" && (plainRow(i) || created[i])
	}
	takes := len(dispatchKeys) > 0 // whether a job may take a slot
	for i, r := range rows {
		if declares(i) {
			keys = append(keys, r.ConcKey)
			takes = takes || r.State == StateReady
		}
	}
	writes := s.repoint(pointers, repointed)
	var sl *slots
	if len(keys) > 0 {
		lock := s.lockSlotsSeeing
		if !waitsForSlots(ctx) {
			lock = s.lockSlotsUnwaiting
		}
		var err error
		if sl, err = lock(ctx, ex, keys, c, takes); err != nil {
			return nil, err
		}
	}
	// Their slots go to the key's first blocked jobs, before any job
	// enqueued now takes one, as a completion's do (join cleared their
	// holds_slot).
	if err := sl.giveEach(ctx, unslotted); err != nil {
		return nil, err
	}
	if len(dispatched) > 0 {
		// A full job that waited becomes ready at once; a claim may send
		// it back to wait on its rate limit. One of a paused queue that
		// needs a slot stays scheduled, due now, until the resume.
		var due []DueRow
		var dueAt []int
		for k, d := range dispatched {
			if sl.waits(d.Queue, d.Conc, d.HoldsSlot) {
				out[dispatchedAt[k]].State = StateScheduled
				continue
			}
			due, dueAt = append(due, d), append(dueAt, dispatchedAt[k])
		}
		pr, w := s.promoteLocked(due, sl, nowUS)
		for k, i := range dueAt {
			out[i].State = pr.states[k]
		}
		writes = append(writes, w...)
		writes = append(writes, s.notifyWrites(pr.queues)...)
	}
	if sl != nil {
		var took []int64
		var missed []SetRow
		for i := range rows {
			r := &rows[i]
			if !declares(i) {
				continue
			}
			if r.State != StateReady || sl.waits(r.Queue, jobs[i].Conc, false) {
				// Delayed: it takes its slot when its time comes,
				// under the limit declared by then. Or its queue is
				// paused: it waits, scheduled and due, for the resume.
				sl.declare(jobs[i].Conc)
				if r.State == StateReady {
					r.State = StateScheduled
					if created[i] {
						missed = append(missed, SetRow{ID: out[i].ID, State: StateScheduled, RunAt: r.RunAt})
					}
					out[i].State = r.State
				}
				continue
			}
			switch {
			case sl.enqueue(jobs[i].Conc):
				r.HoldsSlot = true
				if created[i] {
					took = append(took, out[i].ID)
				}
			case jobs[i].Conc.Discard:
				r.State, r.LastError, r.FinishedAt = StateCancelled, DiscardedError+" for "+r.ConcKey, nowUS
			default:
				r.State = StateBlocked
			}
			if created[i] && r.State != StateReady {
				missed = append(missed, SetRow{ID: out[i].ID, State: r.State, Error: r.LastError, FinishedAt: r.FinishedAt})
			}
			out[i].State = r.State
		}
		if len(took) > 0 {
			writes = append(writes, stmt(s.q.MarkSlots(took, true)))
		}
		if len(missed) > 0 {
			writes = append(writes, s.q.setJobRuns(StateReady, 0, nowUS, missed)...)
		}
		writes = append(writes, sl.writes()...)
	}

	var plain []InsertRow
	var at []int
	for i := range jobs {
		if plainRow(i) {
			plain = append(plain, rows[i])
			at = append(at, i)
		}
	}
	if len(plain) > 0 {
		ids, err := s.insertAll(ctx, ex, plain)
		if err != nil {
			return nil, err
		}
		for k, i := range at {
			out[i] = Enqueued{ID: ids[k], State: rows[i].State}
		}
	}
	// The fairness keys' finishes, now that it is known which rows will
	// never run: those a limit discarded, the calls that joined a pending
	// job.
	writes = append(writes, fair.saves(s, rows, func(i int) bool {
		return rows[i].State == StateCancelled || out[i].Joined
	})...)
	if err := pipeline(ctx, ex, writes, nil); err != nil {
		return nil, fmt.Errorf("save semaphores, dispatched jobs and fairness keys: %w", err)
	}
	return out, nil
}

// coalesced is what a coalescing call did: the job it joined or created,
// whether it created it, and, when the call filled a waiting job that
// dispatches once full, that job to promote. A call that may not join the
// pending job of its key (Coalesce.joins) is alone: enqueueTx inserts it
// as a job that holds no key.
type coalesced struct {
	Enqueued
	created  bool
	alone    bool
	dispatch *DueRow
	// unslotted is the joined job when a debounce sent it back to wait
	// from holding a concurrency slot, which it gives back (enqueueTx).
	unslotted *DueRow
}

// coalesceOne joins the call to the pending job of its key, which the
// key's row points to (pointers, lockCoalesceKeys), or creates that job,
// and reports which.
func (s *Store) coalesceOne(ctx context.Context, ex Executor, now time.Time, j NewJob, row *InsertRow, pointers map[string]int64) (coalesced, error) {
	nowUS := Micros(now)
	rule := j.Coalesce.Rule
	row.CoalesceKey, row.FirstCallAt = j.Coalesce.Key, nowUS
	if rule.Debounce > 0 {
		if at := MicrosNotBefore(now.Add(rule.Debounce)); at > row.RunAt {
			row.RunAt, row.State = at, StateScheduled
		}
	}
	for round := 0; round < maxCoalesceRounds; round++ {
		var p *PendingRow
		var err error
		if round == 0 {
			p, err = s.pointedPending(ctx, ex, j.Coalesce.Key, pointers[j.Coalesce.Key])
		} else {
			// The insert met a pending job of the key that its row does
			// not point to: one a process of a version before migration
			// 020 made, which takes no key row (PostgreSQL's and SQLite's
			// unique index finds it; MySQL's is not unique).
			p, err = s.lockPending(ctx, ex, j.Coalesce.Key)
		}
		if err != nil {
			return coalesced{}, err
		}
		if p != nil && !j.Coalesce.joins(j.Kind, p.Kind) {
			// Replace or Collect would hand this kind's args to another
			// kind's handler, which may drop them: the call makes a job
			// of its own, without the key (enqueueTx inserts it).
			row.CoalesceKey, row.FirstCallAt = "", 0
			return coalesced{alone: true}, nil
		}
		if p != nil {
			jn, err := s.join(ctx, ex, now, rule, p, row)
			co := coalesced{Enqueued: Enqueued{ID: p.ID, Joined: true, State: jn.state}}
			d := &DueRow{ID: p.ID, Queue: p.Queue, Conc: p.Conc, HoldsSlot: p.HoldsSlot,
				CameBack: !p.AttemptedAt.IsZero() || p.Deferrals > 0}
			switch {
			case jn.dispatch:
				co.dispatch = d
			case jn.debounced && p.HoldsSlot && p.Conc != nil:
				co.unslotted = d
			}
			return co, err
		}
		id, ok, err := s.insertCoalescing(ctx, ex, *row)
		if err != nil || ok {
			return coalesced{Enqueued: Enqueued{ID: id, State: row.State}, created: ok}, err
		}
	}
	return coalesced{}, fmt.Errorf("coalesce %s: the pending job kept changing under this call; try again", j.Coalesce.Key)
}

// joins reports whether a call of kind may join the pending job of the
// kind pending. A Discard call joins any job that holds its key, as the
// kinds of one Group share keys. A Replace or Collect call joins only a job
// of its own kind: it gives the job its args, which another kind's handler
// would decode as its own or drop. Registration refuses such a Group
// (jobs.Register), but processes that run different registries, during a
// deploy, may still meet on one key: the call then makes a job of its own.
func (c *Coalesce) joins(kind, pending string) bool {
	return c.Rule.OnConflict == coalesce.Discard || pending == kind
}

// lockCoalesceKeys locks the rows of the keys that the calls at order
// (sorted by key) coalesce on, creating those missing, and returns the job
// each row points to (0 for none): the key's pending job unless it has
// released the key since. Only coalescing calls lock these rows, after the
// fairness keys and before anything else, in key order, so no other call
// creates or joins a pending job of the key until this transaction ends.
// The pointer is read with the row's lock, so as last committed at any
// isolation level: a caller's transaction at REPEATABLE READ, whose plain
// reads may see a snapshot older than the key's job, finds it too. A
// claim or a cancel that releases a key leaves its row alone, so neither
// waits for a row a call holds (pointedPending checks the job).
func (s *Store) lockCoalesceKeys(ctx context.Context, ex Executor, jobs []NewJob, order []int) (map[string]int64, error) {
	if len(order) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(order))
	for _, i := range order {
		if k := jobs[i].Coalesce.Key; len(keys) == 0 || keys[len(keys)-1] != k {
			keys = append(keys, k)
		}
	}
	pointers := make(map[string]int64, len(keys))
	stmts := []Stmt{stmt(s.q.LockCoalesceKeys(keys))}
	for _, k := range keys {
		stmts = append(stmts, query(s.q.ReadCoalesceKey(k)))
	}
	err := pipeline(ctx, ex, stmts, func(_ int, rows Rows) error {
		for rows.Next() {
			var key string
			var id int64
			if err := rows.Scan(&key, &id); err != nil {
				return err
			}
			pointers[key] = id
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lock coalesce keys: %w", err)
	}
	return pointers, nil
}

// repoint points the rows of the keys a call created a pending job for to
// that job (the last one, when calls of one enqueue made several).
func (s *Store) repoint(pointers map[string]int64, repointed map[string]bool) []Stmt {
	if len(repointed) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(repointed))
	ids := make([]int64, len(keys))
	for i, k := range keys {
		ids[i] = pointers[k]
	}
	return []Stmt{stmt(s.q.PointCoalesceKeys(keys, ids))}
}

// pointedPending locks the job a key's row points to (id; 0 for none)
// through the primary key, if it still holds the key, or returns nil. It
// never locks the coalesce index's entry: a claim or a cancel that holds
// the job locks that entry to release the key (on MySQL, whose InnoDB
// locks index entries apart from rows), so a call that held the entry
// while it waited for the job could close a cycle with it.
func (s *Store) pointedPending(ctx context.Context, ex Executor, key string, id int64) (*PendingRow, error) {
	if id == 0 {
		return nil, nil
	}
	q, args := s.q.LockPendingByID(id, key)
	return s.readPending(ctx, ex, q, args)
}

// lockPending locks the pending job that holds key through the coalesce
// index, or returns nil: for a job no key row points to (coalesceOne).
func (s *Store) lockPending(ctx context.Context, ex Executor, key string) (*PendingRow, error) {
	q, args := s.q.LockPending(key)
	return s.readPending(ctx, ex, q, args)
}

// readPending runs a statement that reads the pending job of a key.
func (s *Store) readPending(ctx context.Context, ex Executor, q string, args []any) (*PendingRow, error) {
	var first nullInt64
	rows, err := s.queryJobInfosExtra(ctx, ex, q, args, &first)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return &PendingRow{JobInfo: *rows[0], FirstCallAt: first.Int64}, nil
}

// insertCoalescing inserts a job that takes a coalesce key and reports
// false when a pending job already holds the key.
func (s *Store) insertCoalescing(ctx context.Context, ex Executor, row InsertRow) (int64, bool, error) {
	q, args := s.q.InsertCoalescing(row)
	if s.q.c.Returning {
		ids, err := queryInt64s(ctx, ex, q, args)
		if err != nil || len(ids) == 0 {
			return 0, false, err
		}
		return ids[0], true, nil
	}
	res, err := exec(ctx, ex, q, args)
	if err != nil || res.RowsAffected != 1 {
		return 0, false, err
	}
	return res.LastInsertID, true, nil
}

// joined is what a call did to the pending job it joined: the job's state
// after; whether the call filled it and it is to be dispatched, made ready
// at once, which enqueueTx does with the semaphores it locks (the state is
// then scheduled, due now); and whether a debounce moved it to a later
// time, scheduled, where a job that held a concurrency slot gives it
// back, which enqueueTx does too.
type joined struct {
	state     State
	dispatch  bool
	debounced bool
}

// join applies one call to the pending job p and says what it did. A
// debounce moves a ready, scheduled or blocked job, not a parked one.
func (s *Store) join(ctx context.Context, ex Executor, now time.Time, rule coalesce.Spec, p *PendingRow, row *InsertRow) (joined, error) {
	nowUS := Micros(now)
	u := CoalesceUpdate{ID: p.ID, Calls: p.Calls, State: p.State}
	var writes []Stmt
	dispatch, debounced := false, false
	switch rule.OnConflict {
	case coalesce.Replace:
		u.Args = row.Args
	case coalesce.Collect:
		u.Calls++
		writes = append(writes, stmt(s.q.InsertCall(p.ID, u.Calls, row.Args, nowUS)))
		if rule.MaxCalls > 0 && u.Calls >= rule.MaxCalls {
			u.ReleaseKey = true // full: the next call starts a new job
			dispatch = rule.Dispatch && (p.State == StateScheduled || p.State == StateParked)
		}
	}
	switch {
	case dispatch:
		u.State, u.RunAt = StateScheduled, nowUS
	case rule.Debounce > 0 && (p.State == StateReady || p.State == StateScheduled || p.State == StateBlocked):
		// A ready job gives its concurrency slot back (enqueueTx): a
		// steady stream of calls would otherwise hold it, for as long as
		// the calls go on, from the key's other jobs. A blocked job holds
		// no slot and waits in its key's line by priority and id. Either
		// goes back to scheduled and takes a slot, or its place in that
		// line again, when it comes due. A parked job is left where its
		// budget counts it (docs/coalesce.md).
		var rateSlot time.Time
		if p.State == StateScheduled && p.WaitKey != "" {
			rateSlot = p.RunAt
		}
		if at := rule.RunAt(now, FromMicros(p.FirstCallAt), rateSlot); at.After(now) {
			u.State, u.RunAt = StateScheduled, MicrosNotBefore(at)
			debounced = true
		}
	}
	writes = append(writes, stmt(s.q.UpdateCoalesced(u)))
	if debounced && p.HoldsSlot {
		// Its slot's count is given back with the semaphores, which
		// are locked after every pending job (enqueueTx); the flag now,
		// so that a later call of this enqueue on the job sees it.
		writes = append(writes, stmt(s.q.MarkSlots([]int64{p.ID}, false)))
	}
	if err := pipeline(ctx, ex, writes, nil); err != nil {
		return joined{}, fmt.Errorf("join pending job %d: %w", p.ID, err)
	}
	return joined{state: u.State, dispatch: dispatch, debounced: debounced}, nil
}

// loadCalls attaches their collected calls to the jobs that have more than
// one.
// anyCalls reports whether a claimed job has coalesced calls to load.
func anyCalls(jobs []*Job) bool {
	return slices.ContainsFunc(jobs, func(j *Job) bool { return j.Calls > 1 })
}

func (s *Store) loadCalls(ctx context.Context, ex Executor, jobs []*Job) error {
	byID := map[int64]*Job{}
	var ids []int64
	for _, j := range jobs {
		if j.Calls > 1 {
			byID[j.ID] = j
			ids = append(ids, j.ID)
			j.CallArgs = [][]byte{j.Args}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	q, args := s.q.LoadCalls(ids)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("load calls: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var body string
		if err := rows.Scan(&id, &body); err != nil {
			return err
		}
		if j := byID[id]; j != nil {
			j.CallArgs = append(j.CallArgs, []byte(body))
		}
	}
	return rows.Err()
}
