package engine

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Promote makes up to batch scheduled jobs that are due at now ready, and
// returns how many due jobs it took (made ready, blocked or discarded) and
// the queues that gained ready jobs: PromoteDue, counted.
func (s *Store) Promote(ctx context.Context, c Clock, batch int) (int, []string, error) {
	p, err := s.PromoteDue(ctx, c, batch)
	return p.Due, p.Queues, err
}

// Promoted is what one PromoteDue did.
type Promoted struct {
	// Due counts the due jobs it took: made ready, or, with no
	// concurrency slot free, blocked or discarded (not those it left due,
	// their key's semaphore held by another transaction).
	Due int
	// Queues are the queues that gained ready jobs.
	Queues []string
	// Discarded has the kind of each job it discarded (cancelled with
	// DiscardedError, for want of a slot), one entry per job.
	Discarded []string
	// More is set when more due jobs may be there for a promotion to take
	// at once: it took at least one due job, and its last round read as
	// many due jobs as it asked for (a full batch; or, past the due jobs
	// it left behind held keys, its last round's, dueRounds). A promotion
	// that took none leaves it unset, so that keys other transactions
	// hold for long, whose jobs fill every round, make a caller that
	// promotes again while it is set (the dispatcher) do so no more often
	// than it takes due jobs.
	More bool
}

// PromoteDue makes up to batch scheduled jobs that are due at now ready. A job
// with a concurrency limit takes a slot as it becomes ready, unless it
// kept its slot while it waited (a retry); with none free it is blocked,
// or discarded when its limit says so and it was never ready before (one
// that comes back, from a 429 or a deferral, is blocked). A due job of a
// paused queue that would take a slot is left scheduled until the queue
// resumes (LockDue), holding none of the slots other queues' jobs of its
// key wait for. A due job that would take a slot of a key whose semaphore
// another transaction holds (an app's open transaction that enqueued a
// job of the key) is left due, for a later promotion, and the others are
// promoted at once (lockDueSlots), with the jobs due after it, up to
// batch: the jobs left count in neither (dueRounds). Several dispatchers
// may run it at once; each job is promoted once. Once its transaction
// commits, it reports the jobs it discarded to the store's watchers
// (WatchDiscards).
func (s *Store) PromoteDue(ctx context.Context, c Clock, batch int) (Promoted, error) {
	var n int
	var queues, discarded []string
	// full is set when the last round read as many due jobs as it asked
	// for: more may be due past them (Promoted.More).
	var full bool
	err := s.inTx(ctx, func(tx Tx) error {
		n, queues, discarded, full = 0, nil, nil, false
		at, err := s.now(ctx, tx, c)
		if err != nil {
			return err
		}
		nowUS := Micros(at)
		// held lists the keys whose due jobs a round left; the next round
		// passes over them (see dueRounds).
		var held []string
		for round := 1; ; round++ {
			limit := batch - n
			q, args := s.q.LockDue(nowUS, limit)
			if len(held) > 0 {
				q, args = s.q.LockDueBeyond(nowUS, held, limit)
			}
			due, err := scanDue(ctx, tx, q, args)
			if err != nil {
				return fmt.Errorf("lock due jobs: %w", err)
			}
			pr, err := s.promote(ctx, tx, due, nowUS, true, nil)
			if err != nil {
				return err
			}
			n += len(due) - len(pr.left)
			queues = appendNew(queues, pr.queues...)
			discarded = append(discarded, pr.discarded...)
			full = len(due) == limit
			if len(pr.left) == 0 || !full || round == dueRounds {
				return nil
			}
			held = appendNew(held, leftKeys(due, pr.left)...)
		}
	})
	if err != nil {
		return Promoted{}, s.wrap(fmt.Errorf("promote: %w", err))
	}
	s.Wake(queues...)
	s.discards.report(discarded)
	return Promoted{Due: n, Queues: queues, Discarded: discarded, More: full && n > 0}, nil
}

// dueRounds bounds the rounds of a promotion (PromoteDue, and a claim's
// promoteDue). A round that leaves due jobs of keys whose semaphores other
// transactions hold, and took as many due jobs as it asked for, is followed
// by one that passes over those keys' due jobs (LockDueBeyond), so that
// they, always the soonest due while the transactions stay open, do not
// hold back the jobs due after them, unlimited ones too. A round that
// leaves none, or took fewer than it asked for, is the last: a promotion
// that leaves no job due runs one statement as before.
const dueRounds = 4

// leftKeys lists the concurrency keys of the jobs of due that a promotion
// left (promotion.left).
func leftKeys(due []DueRow, left []int64) []string {
	var keys []string
	for _, d := range due {
		if d.Conc != nil && slices.Contains(left, d.ID) {
			keys = appendNew(keys, d.Conc.Key)
		}
	}
	return keys
}

// appendNew appends to list the elements of add it does not hold yet.
func appendNew[T comparable](list []T, add ...T) []T {
	for _, a := range add {
		if !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	return list
}

// promotion is what a promote did: the queues that gained ready jobs, the
// jobs made ready, those of them that took a concurrency slot, the jobs
// it left due because another transaction held their key's semaphore,
// each promoted job's state after it, in the order they were given, and
// the kind of each job it discarded.
type promotion struct {
	queues               []string
	ready, slotted, left []int64
	states               []State
	discarded            []string
}

// promote makes locked scheduled jobs ready, taking a concurrency slot for
// each that needs one (blocking or discarding it when none is free), and
// says what it did; it wakes the workers of the queues that gained ready
// jobs when notify is set. A job that needs a slot of a key whose
// semaphore another transaction holds is left as it is, due
// (promotion.left), and waits for no one (lockDueSlots). It also locks
// the semaphores of also first, waiting for them
// (ClaimParams.slotHint).
func (s *Store) promote(ctx context.Context, ex Executor, due []DueRow, nowUS int64, notify bool, also []string) (promotion, error) {
	if len(due) == 0 && len(also) == 0 {
		return promotion{}, nil
	}
	var sl *slots
	var left []int64
	if keys := slotKeys(due); len(keys) > 0 || len(also) > 0 {
		var busy []string
		var err error
		if sl, busy, err = s.lockDueSlots(ctx, ex, keys, also, FromMicros(nowUS)); err != nil {
			return promotion{}, err
		}
		if len(busy) > 0 {
			due = slices.DeleteFunc(slices.Clone(due), func(d DueRow) bool {
				if d.Conc == nil || d.HoldsSlot || !slices.Contains(busy, d.Conc.Key) {
					return false
				}
				left = append(left, d.ID)
				return true
			})
		}
	}
	pr, writes := s.promoteLocked(due, sl, nowUS)
	pr.left = left
	if sl != nil {
		writes = append(writes, sl.writes()...)
	}
	if notify {
		writes = append(writes, s.notifyWrites(pr.queues)...)
	}
	return pr, pipeline(ctx, ex, writes, nil)
}

// notifyWrites is the statement that wakes the workers of queues, when
// there are any and the database can.
func (s *Store) notifyWrites(queues []string) []Stmt {
	if q, args := s.q.Notify(queues); q != "" && len(queues) > 0 {
		return []Stmt{stmt(q, args)}
	}
	return nil
}

// slotKeys lists the semaphores that promoting due locks: those of the
// jobs that need a slot and do not hold one.
func slotKeys(due []DueRow) []string {
	var keys []string
	for _, d := range due {
		if d.Conc != nil && !d.HoldsSlot {
			keys = append(keys, d.Conc.Key)
		}
	}
	return keys
}

// promoteLocked decides the promotion of due on the semaphores sl holds
// (nil when none of them needs a slot) and returns it with the statements
// that write it, except sl's own. promotion.states has each due job's
// state after it.
func (s *Store) promoteLocked(due []DueRow, sl *slots, nowUS int64) (promotion, []Stmt) {
	var pr promotion
	var others []SetRow
	for _, d := range due {
		switch {
		case d.Conc == nil || d.HoldsSlot:
		case sl.take(d.Conc):
			pr.slotted = append(pr.slotted, d.ID)
		case d.Conc.Discard && !d.CameBack:
			others = append(others, SetRow{ID: d.ID, State: StateCancelled, Error: DiscardedError + " for " + d.Conc.Key, FinishedAt: nowUS})
			pr.states = append(pr.states, StateCancelled)
			pr.discarded = append(pr.discarded, d.Kind)
			continue
		default:
			others = append(others, SetRow{ID: d.ID, State: StateBlocked})
			pr.states = append(pr.states, StateBlocked)
			continue
		}
		pr.ready = append(pr.ready, d.ID)
		pr.states = append(pr.states, StateReady)
		if !slices.Contains(pr.queues, d.Queue) {
			pr.queues = append(pr.queues, d.Queue)
		}
	}
	var writes []Stmt
	if len(pr.ready) > 0 {
		writes = append(writes, stmt(s.q.MarkReady(pr.ready)))
	}
	if len(pr.slotted) > 0 {
		writes = append(writes, stmt(s.q.MarkSlots(pr.slotted, true)))
	}
	if len(others) > 0 {
		writes = append(writes, s.q.setJobRuns(StateScheduled, 0, nowUS, others)...)
	}
	return pr, writes
}

// scanDue reads LockDue's rows.
func scanDue(ctx context.Context, ex Executor, q string, args []any) ([]DueRow, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DueRow
	for rows.Next() {
		var d DueRow
		var key nullString
		var limit int
		var duration int64
		var discard bool
		var attempted nullInt64
		var deferrals int
		if err := rows.Scan(&d.ID, &d.Queue, &d.Kind, &key, &limit, &duration, &discard, &d.HoldsSlot, &attempted, &deferrals); err != nil {
			return nil, err
		}
		d.CameBack = attempted.Valid || deferrals > 0
		if key.Valid {
			d.Conc = &Conc{Key: key.String, To: limit, Duration: time.Duration(duration) * time.Microsecond, Discard: discard}
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
