package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/ratelimit"
)

// Outcomes are what became of the jobs a process ran.
type Outcomes struct {
	// Completed jobs' handlers returned nil.
	Completed []int64
	// Others move elsewhere: retried, snoozed, failed, cancelled.
	Others []Transition
	// SlotHolders are the jobs among them that held a concurrency slot
	// when claimed and now finish for good (completed, failed, cancelled):
	// their slots are given back, each to the first job blocked on its
	// key.
	SlotHolders []int64
	// WithCalls are the completed jobs that collected calls: with
	// DeleteOnComplete their calls are deleted with them.
	WithCalls []int64
	// WithAttempts are the completed jobs that ran more than once: with
	// DeleteOnComplete the errors kept of their failed runs are deleted
	// with them.
	WithAttempts []int64
	// Pushes hold budgets back after an upstream asked to wait (a 429):
	// none of their jobs is admitted before Until.
	Pushes []BudgetPush
}

// BudgetPush holds a budget back for a while.
type BudgetPush struct {
	Key string
	// Wait is how long, from the moment the finish is recorded (on the
	// clock the budget decides on), no job is admitted.
	Wait time.Duration
	// Params is the limit the budget is charged under.
	Params ratelimit.Params
}

// Finish records the outcomes of jobs the process ran, in one transaction:
// the completed ones in one statement (deleted instead when
// DeleteOnComplete is set), the rest as transitions. A job that is no
// longer running for this process (released as lost, or by a shutdown
// that timed out) is left as it is, its slot too.
//
// c stamps the jobs (finished_at is the caller's time) and decides the
// budgets held back and the slots given back.
func (s *Store) Finish(ctx context.Context, processID int64, c Clock, o Outcomes) error {
	if len(o.Completed) == 0 && len(o.Others) == 0 {
		return nil
	}
	nowUS := Micros(c.Host())
	var woke []string
	err := s.inTx(ctx, func(tx Tx) error {
		woke = nil
		hs, err := s.lockHolders(ctx, tx, o.SlotHolders, processID)
		if err != nil {
			return err
		}
		var writes []Stmt
		if len(o.Completed) > 0 {
			if s.DeleteOnComplete {
				if len(o.WithCalls) > 0 {
					writes = append(writes, stmt(s.q.DeleteCalls(o.WithCalls)))
				}
				if len(o.WithAttempts) > 0 {
					writes = append(writes, stmt(s.q.DeleteAttempts(o.WithAttempts)))
				}
				writes = append(writes, stmt(s.q.DeleteJobs(o.Completed, processID)))
			} else {
				writes = append(writes, stmt(s.q.CompleteJobs(o.Completed, processID, nowUS)))
			}
		}
		// A job released to run again (a worker shutting down) that lost
		// its slot while it ran takes a free one or is blocked.
		var back []slotless
		if readied := readiedIDs(o.Others); len(readied) > 0 {
			if back, err = s.lockSlotless(ctx, tx, readied, processID); err != nil {
				return err
			}
		}
		// Semaphores before budgets, as every transaction that waits for
		// both locks them (lockFreeSlots).
		gives, blocked, queues, err := s.settle(ctx, tx, c, hs, back)
		if err != nil {
			return err
		}
		woke = queues
		var pushedAt time.Time // c's time, when the pushes read it
		if len(o.Pushes) > 0 {
			st, at, err := s.pushBudgets(ctx, tx, c, o.Pushes)
			if err != nil {
				return err
			}
			writes, pushedAt = append(writes, st), at
		}
		if len(o.Others) > 0 {
			others, err := s.resolveWaits(ctx, tx, c, block(o.Others, blocked), pushedAt)
			if err != nil {
				return err
			}
			writes = append(writes, stmt(s.q.SetJobs(StateRunning, processID, nowUS, setRows(others, nowUS))))
			if failed := failedRuns(o.Others); len(failed) > 0 {
				writes = append(writes, stmt(s.q.RecordAttempts(failed, nowUS)))
			}
		}
		return pipelineCommit(ctx, tx, append(writes, gives...), nil)
	})
	if err != nil {
		return s.wrap(fmt.Errorf("finish jobs: %w", err))
	}
	s.Wake(woke...)
	return nil
}

// pushBudgets locks the pushed budgets (in key order), reads c's time
// after the locks, and moves each budget so that nothing is admitted
// before now + Wait: its TAT to that time plus the tolerance, and its slot
// cursor to that time. It returns the statement that saves them, and the
// time it read. A looser limit it meets is prepared as a claim would,
// with the default horizon (a push does not know the worker's).
func (s *Store) pushBudgets(ctx context.Context, tx Tx, c Clock, pushes []BudgetPush) (Stmt, time.Time, error) {
	byKey := map[string]BudgetPush{}
	keys := make([]string, 0, len(pushes))
	for _, p := range pushes {
		if prev, ok := byKey[p.Key]; !ok || p.Wait > prev.Wait {
			if !ok {
				keys = append(keys, p.Key)
			}
			byKey[p.Key] = p
		}
	}
	slices.Sort(keys)
	budgets, at, err := s.lockBudgets(ctx, tx, keys, c)
	if err != nil {
		return Stmt{}, time.Time{}, err
	}
	now := Nanos(at)
	for _, k := range keys {
		p, b := byKey[k], budgets[k]
		b.prepare(p.Params, now, now+DefaultHorizon.Nanoseconds())
		until := now + p.Wait.Nanoseconds()
		b.state.TAT = max(b.state.TAT, until+p.Params.Tolerance())
		b.state.NextSlot = max(b.state.NextSlot, until)
		b.dirty = true
	}
	st, _ := s.saveBudgets(budgets, Micros(at))
	return st, at, nil
}

// Release puts jobs the process claimed but did not finish back to ready,
// giving back the attempt their claim counted. A job that keeps its
// concurrency slot; one that lost it while it ran (its key expired) takes
// a free one, or is blocked. A worker shutting down calls it for the jobs
// still running when its timeout ran out.
func (s *Store) Release(ctx context.Context, processID int64, c Clock, ids []int64) error {
	err := s.inTx(ctx, func(tx Tx) error { return s.release(ctx, tx, processID, c, ids) })
	if err != nil {
		return s.wrap(fmt.Errorf("release jobs: %w", err))
	}
	s.Wake("*")
	return nil
}

// ReleaseStrays releases back to ready, with their attempts given back as
// Release does, the jobs running for the process that are not in known:
// those a claim marked running although its caller saw it fail (its
// commit's reply lost to a dropped connection or a cancelled context),
// which the process would otherwise hold without running for as long as
// it lives. known holds every job the process runs or has results for not
// yet recorded; most is the most strays there can be (the most jobs one
// claim takes). It returns the jobs it released.
func (s *Store) ReleaseStrays(ctx context.Context, processID int64, c Clock, known []int64, most int) ([]int64, error) {
	isKnown := make(map[int64]bool, len(known))
	for _, id := range known {
		isKnown[id] = true
	}
	var strays []int64
	err := s.inTx(ctx, func(tx Tx) error {
		q, args := s.q.LockRunningOf(processID, len(known)+max(most, 1))
		ids, err := queryInt64s(ctx, tx, q, args)
		if err != nil {
			return fmt.Errorf("find running jobs: %w", err)
		}
		strays = slices.DeleteFunc(ids, func(id int64) bool { return isKnown[id] })
		if len(strays) == 0 {
			return nil
		}
		return s.release(ctx, tx, processID, c, strays)
	})
	if err != nil {
		return nil, s.wrap(fmt.Errorf("release stray jobs: %w", err))
	}
	if len(strays) > 0 {
		s.Wake("*")
	}
	return strays, nil
}

// release makes the jobs running for the process ready again, their
// attempt given back — blocked instead, those that lost their concurrency
// slot while they ran and find none free — and notifies every queue's
// listeners (the caller wakes this process's after the commit).
func (s *Store) release(ctx context.Context, tx Tx, processID int64, c Clock, ids []int64) error {
	back, err := s.lockSlotless(ctx, tx, ids, processID)
	if err != nil {
		return err
	}
	stmts, blocked, _, err := s.settle(ctx, tx, c, nil, back)
	if err != nil {
		return err
	}
	now := c.Host()
	ts := make([]Transition, len(ids))
	for i, id := range ids {
		ts[i] = Transition{ID: id, State: StateReady, RunAt: now, AttemptDelta: -1}
	}
	if err := s.transition(ctx, tx, StateRunning, processID, Micros(now), block(ts, blocked)); err != nil {
		return err
	}
	if err := pipeline(ctx, tx, stmts, nil); err != nil {
		return err
	}
	return s.notify(ctx, tx, []string{"*"})
}

// readiedIDs are the jobs that ts make ready again.
func readiedIDs(ts []Transition) []int64 {
	var ids []int64
	for _, t := range ts {
		if t.State == StateReady {
			ids = append(ids, t.ID)
		}
	}
	return ids
}

// block returns ts with the jobs of blocked moved to blocked instead.
func block(ts []Transition, blocked map[int64]bool) []Transition {
	if len(blocked) == 0 {
		return ts
	}
	out := slices.Clone(ts)
	for i := range out {
		if blocked[out[i].ID] {
			out[i].State = StateBlocked
		}
	}
	return out
}

// transition applies transitions to jobs in state from.
func (s *Store) transition(ctx context.Context, tx Executor, from State, processID, now int64, ts []Transition) error {
	if len(ts) == 0 {
		return nil
	}
	q, args := s.q.SetJobs(from, processID, now, setRows(ts, now))
	if _, err := exec(ctx, tx, q, args); err != nil {
		return fmt.Errorf("move jobs from %s: %w", from, err)
	}
	return nil
}

// resolveWaits gives the scheduled transitions that carry a Wait instead
// of a RunAt their run time: Wait after at, c's time in tx, which it reads
// when at is zero (one round trip on the database's clock, only when some
// transition waits and no push has read it).
func (s *Store) resolveWaits(ctx context.Context, tx Tx, c Clock, ts []Transition, at time.Time) ([]Transition, error) {
	waits := func(t Transition) bool { return t.State == StateScheduled && t.RunAt.IsZero() }
	if !slices.ContainsFunc(ts, waits) {
		return ts, nil
	}
	if at.IsZero() {
		var err error
		if at, err = s.now(ctx, tx, c); err != nil {
			return nil, err
		}
	}
	out := slices.Clone(ts)
	for i, t := range out {
		if waits(t) {
			out[i].RunAt = at.Add(t.Wait)
		}
	}
	return out, nil
}

// setRows turns transitions into SetJobs rows.
func setRows(ts []Transition, now int64) []SetRow {
	rows := make([]SetRow, len(ts))
	for i, t := range ts {
		rows[i] = SetRow{ID: t.ID, State: t.State, WaitKey: t.WaitKey, Error: t.Error, AttemptDelta: t.AttemptDelta}
		if !t.RunAt.IsZero() {
			rows[i].RunAt = Micros(t.RunAt)
		}
		if t.Finished {
			rows[i].FinishedAt = now
		}
	}
	return rows
}

// notify wakes listening workers for queues that gained ready jobs, on
// databases that can.
func (s *Store) notify(ctx context.Context, ex Executor, queues []string) error {
	if len(queues) == 0 {
		return nil
	}
	q, args := s.q.Notify(queues)
	if q == "" {
		return nil
	}
	if _, err := exec(ctx, ex, q, args); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

// failedRuns are the transitions that end a run that failed: they carry
// its error and spend its attempt (a run given back, such as one an
// upstream 429 turned away, is not a failed attempt).
func failedRuns(ts []Transition) []int64 {
	var ids []int64
	for _, t := range ts {
		if t.Error != "" && t.AttemptDelta == 0 {
			ids = append(ids, t.ID)
		}
	}
	return ids
}
