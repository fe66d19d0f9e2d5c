package engine

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/ratelimit"
)

// Run is one run of a job: the job, and the claim that made it (Job.Claims
// as claimed: the job's claims counter, which every claim raises and
// nothing lowers). What a run's result or release writes changes the job
// only while the job still runs, for the process that writes it, under
// that claim. A process presumed dead may claim the job again, under the
// same process id, before its heartbeat tells it; and a snooze, a 429 or a
// release gives the attempt back, so the next run of the job may be at
// the same attempt as the one that ended. Either way the new run is a
// later claim, so a lost run's result, or a result written again, no
// longer matches. A run claimed before migration 017 is claim 0, as its
// job's row says until it is claimed again.
type Run struct {
	ID    int64
	Claim int64
}

// Outcomes are what became of the runs a process made.
type Outcomes struct {
	// Completed runs' handlers returned nil.
	Completed []Run
	// Others move elsewhere: retried, snoozed, failed, cancelled. Each
	// names the claim of its run (Transition.Claim).
	Others []Transition
	// SlotHolders are the runs among them whose job held a concurrency
	// slot when claimed and now finish for good (completed, failed,
	// cancelled), or wait on an upstream: their slots are given back, each
	// to the first job blocked on its key.
	SlotHolders []Run
	// WithCalls are the completed runs whose job collected calls: with
	// DeleteOnComplete their calls are deleted with it.
	WithCalls []Run
	// WithAttempts are the completed runs whose job ran before (claimed
	// more than once; the attempt does not tell, as an operator's retry
	// sets it back to 0 and keeps the failed runs): with DeleteOnComplete
	// the errors kept of its failed runs are deleted with it.
	WithAttempts []Run
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
	// Run is the run the upstream turned away: the budget is held back
	// only while that run still holds its claim (once, then: a result
	// written again pushes nothing).
	Run Run
}

// check refuses outcomes that name no claim a run can have (claims count
// from 1; 0 is a run claimed before migration 017).
func (o Outcomes) check() error {
	for _, rs := range [][]Run{o.Completed, o.SlotHolders, o.WithCalls, o.WithAttempts} {
		for _, r := range rs {
			if r.Claim < 0 {
				return fmt.Errorf("job %d: the outcome names no claim", r.ID)
			}
		}
	}
	for _, t := range o.Others {
		if t.Claim < 0 {
			return fmt.Errorf("job %d: the outcome names no claim", t.ID)
		}
	}
	for _, p := range o.Pushes {
		if p.Run.Claim < 0 {
			return fmt.Errorf("job %d: the push of budget %q names no claim", p.Run.ID, p.Key)
		}
	}
	return nil
}

// toLock are the runs whose outcome writes more than its own statement,
// which Finish finds first (lockRuns): those that give a slot back or need
// one, keep a failed attempt, hold budgets back, or, with
// deleteOnComplete, take calls and kept attempts with them.
func (o Outcomes) toLock(deleteOnComplete bool) []Run {
	runs := slices.Clone(o.SlotHolders)
	for _, t := range o.Others {
		if t.State == StateReady || t.failed() {
			runs = append(runs, t.run())
		}
	}
	for _, p := range o.Pushes {
		runs = append(runs, p.Run)
	}
	if deleteOnComplete && len(o.Completed) > 0 {
		runs = append(runs, o.WithCalls...)
		runs = append(runs, o.WithAttempts...)
	}
	return runs
}

// Finish records the outcomes of the runs the process made, in one
// transaction: the completed ones in one statement per claim (deleted
// instead when DeleteOnComplete is set), the rest as transitions. A run
// whose job no longer runs for this process under its claim (released as
// lost, perhaps claimed again since, or by a shutdown that timed out; or
// a result already recorded, written again, even after the job was
// claimed again at the same attempt) changes nothing: neither the
// job, nor its slot, nor its budgets, nor its calls and kept attempts, and
// it keeps no failed attempt.
//
// Completions that need nothing more are matched by their statement
// alone; the runs whose outcome writes more (Outcomes.toLock) are locked
// first, in one statement, and every write of theirs is limited to those
// found still running under their claim.
//
// c stamps the jobs (finished_at is the caller's time) and decides the
// budgets held back and the slots given back. It waits for the semaphores
// of the slots it gives back (and takes) as long as another transaction
// holds them: a worker records its results with FinishUnwaiting instead.
func (s *Store) Finish(ctx context.Context, processID int64, c Clock, o Outcomes) error {
	_, err := s.finish(ctx, processID, c, o, true)
	return err
}

// FinishUnwaiting is Finish waiting for no semaphore another transaction
// holds (an app's open transaction that enqueued a job of the key, with
// EnqueueTx): it records, in one transaction, the outcomes of every run
// but those whose job gives back a slot of such a key (it finishes for
// good, waits on an upstream, or was given back), which it returns, by
// job id, sorted, untouched: still running, their slots still held. The
// caller writes them again later (with FinishUnwaiting, or waiting, with
// Finish), each with its slot given back in the same transaction as its
// outcome, once. A run that needs a slot of such a key (released to run
// again after its key expired while it ran) is blocked instead, as a
// reap's is (settleUnwaiting). So one key held open holds back no other
// job's result, and a result waits only for its own key.
func (s *Store) FinishUnwaiting(ctx context.Context, processID int64, c Clock, o Outcomes) (left []int64, err error) {
	return s.finish(ctx, processID, c, o, false)
}

// finish is Finish, waiting for the semaphores it locks, or, without
// wait, FinishUnwaiting.
func (s *Store) finish(ctx context.Context, processID int64, c Clock, all Outcomes, wait bool) ([]int64, error) {
	if len(all.Completed) == 0 && len(all.Others) == 0 {
		return nil, nil
	}
	if err := all.check(); err != nil {
		return nil, fmt.Errorf("finish jobs: %w", err)
	}
	nowUS := Micros(c.Host())
	lock := all.toLock(s.DeleteOnComplete)
	var woke []string
	var left []int64
	err := s.inTx(ctx, func(tx Tx) error {
		woke, left = nil, nil
		held, err := s.lockRuns(ctx, tx, processID, lock)
		if err != nil {
			return err
		}
		hs := holders{}
		for _, r := range all.SlotHolders {
			if h, ok := held[r]; ok && h.holdsSlot && h.conc != nil {
				hs[r.ID] = h.conc.Key
			}
		}
		// A job released to run again (a worker shutting down) that lost
		// its slot while it ran takes a free one or is blocked; one of a
		// paused queue waits scheduled for the resume.
		var back []slotless
		for _, t := range all.Others {
			if b, ok := held.slotless(t.run()); ok && t.State == StateReady {
				back = append(back, b)
			}
		}
		// Semaphores before budgets, as every transaction that waits for
		// both locks them (lockFreeSlots).
		var gives []Stmt
		var instead map[int64]State
		var out map[int64]bool
		if wait {
			gives, instead, woke, err = s.settle(ctx, tx, c, hs, back)
		} else {
			gives, instead, out, woke, err = s.settleUnwaiting(ctx, tx, c, hs, back)
		}
		if err != nil {
			return err
		}
		// The runs whose key another transaction holds are left whole,
		// for a later write: a slot goes back with its job's outcome.
		o := all.without(out)
		for id := range out {
			left = append(left, id)
		}
		slices.Sort(left)
		var writes []Stmt
		if len(o.Completed) > 0 {
			if s.DeleteOnComplete {
				if ids := held.ids(o.WithCalls); len(ids) > 0 {
					writes = append(writes, stmt(s.q.DeleteCalls(ids)))
				}
				if ids := held.ids(o.WithAttempts); len(ids) > 0 {
					writes = append(writes, stmt(s.q.DeleteAttempts(ids)))
				}
				for _, g := range byClaim(o.Completed) {
					writes = append(writes, stmt(s.q.DeleteJobs(g.ids, processID, g.claim)))
				}
			} else {
				for _, g := range byClaim(o.Completed) {
					writes = append(writes, stmt(s.q.CompleteJobs(g.ids, processID, g.claim, nowUS)))
				}
			}
		}
		var pushedAt time.Time // c's time, when the pushes read it
		if pushes := held.pushes(o.Pushes); len(pushes) > 0 {
			st, at, err := s.pushBudgets(ctx, tx, c, pushes)
			if err != nil {
				return err
			}
			writes, pushedAt = append(writes, st...), at
		}
		if len(o.Others) > 0 {
			others, err := s.resolveWaits(ctx, tx, c, block(o.Others, instead), pushedAt)
			if err != nil {
				return err
			}
			writes = append(writes, s.q.setJobRuns(StateRunning, processID, nowUS, setRows(others, nowUS))...)
			if failed := held.ids(failedRuns(o.Others)); len(failed) > 0 {
				writes = append(writes, stmt(s.q.RecordAttempts(failed, nowUS)))
			}
		}
		return pipelineCommit(ctx, tx, append(writes, gives...), nil)
	})
	if err != nil {
		return nil, s.wrap(fmt.Errorf("finish jobs: %w", err))
	}
	s.Wake(woke...)
	return left, nil
}

// without returns o without the outcomes of the jobs of ids.
func (o Outcomes) without(ids map[int64]bool) Outcomes {
	if len(ids) == 0 {
		return o
	}
	keep := func(rs []Run) []Run {
		return slices.DeleteFunc(slices.Clone(rs), func(r Run) bool { return ids[r.ID] })
	}
	return Outcomes{
		Completed:    keep(o.Completed),
		Others:       slices.DeleteFunc(slices.Clone(o.Others), func(t Transition) bool { return ids[t.ID] }),
		SlotHolders:  keep(o.SlotHolders),
		WithCalls:    keep(o.WithCalls),
		WithAttempts: keep(o.WithAttempts),
		Pushes:       slices.DeleteFunc(slices.Clone(o.Pushes), func(p BudgetPush) bool { return ids[p.Run.ID] }),
	}
}

// heldRun is a run lockRuns found still running for its process under its
// claim, with what its concurrency slot needs.
type heldRun struct {
	queue     string
	holdsSlot bool
	// conc is the job's concurrency limit, nil without one.
	conc *Conc
}

// heldRuns are the runs lockRuns found.
type heldRuns map[Run]heldRun

// lockRuns locks, of runs, the jobs running for processID, and returns
// those still under their run's claim.
func (s *Store) lockRuns(ctx context.Context, ex Executor, processID int64, runs []Run) (heldRuns, error) {
	held := heldRuns{}
	if len(runs) == 0 {
		return held, nil
	}
	want := make(map[Run]bool, len(runs))
	ids := make([]int64, 0, len(runs))
	for _, r := range runs {
		if !want[r] {
			want[r] = true
			ids = append(ids, r.ID)
		}
	}
	slices.Sort(ids)
	q, args := s.q.LockRuns(slices.Compact(ids), processID)
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("lock running jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r Run
		var h heldRun
		var key nullString
		var limit int
		var duration int64
		if err := rows.Scan(&r.ID, &r.Claim, &h.queue, &h.holdsSlot, &key, &limit, &duration); err != nil {
			return nil, fmt.Errorf("lock running jobs: %w", err)
		}
		if !want[r] {
			continue // another run of the job: the one runs names is lost
		}
		if key.Valid {
			h.conc = &Conc{Key: key.String, To: limit, Duration: time.Duration(duration) * time.Microsecond}
		}
		held[r] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lock running jobs: %w", err)
	}
	return held, nil
}

// ids returns the ids of the runs of rs that are held, sorted, once each.
func (held heldRuns) ids(rs []Run) []int64 {
	var ids []int64
	for _, r := range rs {
		if _, ok := held[r]; ok {
			ids = append(ids, r.ID)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// slotless returns run r as settle takes it when it is held and its job
// has a concurrency key but lost its slot while it ran (its key expired).
func (held heldRuns) slotless(r Run) (slotless, bool) {
	h, ok := held[r]
	if !ok || h.holdsSlot || h.conc == nil {
		return slotless{}, false
	}
	return slotless{id: r.ID, queue: h.queue, conc: h.conc}, true
}

// pushes returns the pushes of runs that are held.
func (held heldRuns) pushes(ps []BudgetPush) []BudgetPush {
	var out []BudgetPush
	for _, p := range ps {
		if _, ok := held[p.Run]; ok {
			out = append(out, p)
		}
	}
	return out
}

// claimGroup is the jobs of runs made by the claims counted one number.
type claimGroup struct {
	claim int64
	ids   []int64
}

// byClaim groups runs by claim, lowest first, each group's ids sorted:
// one statement matches each group's jobs under its claim. A batch of
// first runs is one group.
func byClaim(runs []Run) []claimGroup {
	var out []claimGroup
	idx := map[int64]int{}
	for _, r := range runs {
		i, ok := idx[r.Claim]
		if !ok {
			i = len(out)
			idx[r.Claim] = i
			out = append(out, claimGroup{claim: r.Claim})
		}
		out[i].ids = append(out[i].ids, r.ID)
	}
	slices.SortFunc(out, func(a, b claimGroup) int { return cmp.Compare(a.claim, b.claim) })
	for i := range out {
		slices.Sort(out[i].ids)
	}
	return out
}

// pushBudgets locks the pushed budgets (in key order), reads c's time
// after the locks, and moves each budget so that nothing is admitted
// before now + Wait: its TAT to that time plus the tolerance, and its slot
// cursor to that time (ratelimit's Hold), a wait past what the times reach
// holding it as long as they do. It returns the statements that save them,
// and the time it read. A looser limit it meets is prepared as a claim would,
// with the default horizon (a push does not know the worker's). On a
// clock past MaxLimitedRunAt no budget can be decided: it holds none back,
// logs so, and returns no statement, so that the jobs' results (theirs
// and the others' of the batch) are still written.
func (s *Store) pushBudgets(ctx context.Context, tx Tx, c Clock, pushes []BudgetPush) ([]Stmt, time.Time, error) {
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
		return nil, time.Time{}, err
	}
	now, err := budgetNow(at)
	if err != nil {
		slog.Warn("sluice: an upstream's RetryAfter holds back no rate-limit budget", "err", err, "budgets", keys)
		return nil, at, nil
	}
	for _, k := range keys {
		p, b := byKey[k], budgets[k]
		b.prepare(p.Params, now, ratelimit.Later(now, DefaultHorizon.Nanoseconds()))
		p.Params.Hold(&b.state, ratelimit.Later(now, p.Wait.Nanoseconds()))
		b.dirty, b.wait = true, true
	}
	return s.saveBudgets(budgets, Micros(at)), at, nil
}

// Release puts runs the process made but did not finish back to ready,
// giving back the attempt their claim counted. A job that keeps its
// concurrency slot; one that lost it while it ran (its key expired) takes
// a free one, or is blocked, or, its queue paused, waits scheduled for the
// resume (settle). A run whose job no longer runs for the
// process under its claim (presumed lost, and perhaps claimed again) is
// left alone. A worker shutting down calls it for the runs still going on
// when its timeout ran out.
func (s *Store) Release(ctx context.Context, processID int64, c Clock, runs []Run) error {
	err := s.inTx(ctx, func(tx Tx) error { return s.release(ctx, tx, processID, c, runs) })
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
	var strays []Run
	err := s.inTx(ctx, func(tx Tx) error {
		q, args := s.q.LockRunningOf(processID, len(known)+max(most, 1))
		runs, err := queryRuns(ctx, tx, q, args)
		if err != nil {
			return fmt.Errorf("find running jobs: %w", err)
		}
		strays = slices.DeleteFunc(runs, func(r Run) bool { return isKnown[r.ID] })
		if len(strays) == 0 {
			return nil
		}
		return s.release(ctx, tx, processID, c, strays)
	})
	if err != nil {
		return nil, s.wrap(fmt.Errorf("release stray jobs: %w", err))
	}
	if len(strays) == 0 {
		return nil, nil
	}
	s.Wake("*")
	ids := make([]int64, len(strays))
	for i, r := range strays {
		ids[i] = r.ID
	}
	return ids, nil
}

// queryRuns reads rows of id and claims.
func queryRuns(ctx context.Context, ex Executor, q string, args []any) ([]Run, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		var r Run
		if err := rows.Scan(&r.ID, &r.Claim); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// release makes the runs' jobs that still run for the process under their
// claim ready again, their attempt given back — blocked instead, those
// that lost their concurrency slot while they ran and find none free, and
// scheduled, due now, those of them whose queue is paused —
// and notifies every queue's listeners (the caller wakes this process's
// after the commit).
func (s *Store) release(ctx context.Context, tx Tx, processID int64, c Clock, runs []Run) error {
	held, err := s.lockRuns(ctx, tx, processID, runs)
	if err != nil {
		return err
	}
	if len(held) == 0 {
		return nil
	}
	mine := make([]Run, 0, len(held))
	for r := range held {
		mine = append(mine, r)
	}
	slices.SortFunc(mine, func(a, b Run) int { return cmp.Compare(a.ID, b.ID) })
	var back []slotless
	for _, r := range mine {
		if b, ok := held.slotless(r); ok {
			back = append(back, b)
		}
	}
	stmts, instead, _, err := s.settle(ctx, tx, c, nil, back)
	if err != nil {
		return err
	}
	now := c.Host()
	ts := make([]Transition, len(mine))
	for i, r := range mine {
		ts[i] = Transition{ID: r.ID, Claim: r.Claim, State: StateReady, RunAt: now, AttemptDelta: -1}
	}
	if err := s.transition(ctx, tx, StateRunning, processID, Micros(now), block(ts, instead)); err != nil {
		return err
	}
	if err := pipeline(ctx, tx, stmts, nil); err != nil {
		return err
	}
	return s.notify(ctx, tx, []string{"*"})
}

// block returns ts with the jobs of instead moved to the state it names
// for them instead (settle): blocked, or scheduled to run at the time
// their transition names (a paused queue's job that waits for the
// resume; with none, resolveWaits gives it the time of the write).
func block(ts []Transition, instead map[int64]State) []Transition {
	if len(instead) == 0 {
		return ts
	}
	out := slices.Clone(ts)
	for i := range out {
		if st, ok := instead[out[i].ID]; ok {
			out[i].State = st
		}
	}
	return out
}

// transition applies transitions to jobs in state from.
func (s *Store) transition(ctx context.Context, tx Executor, from State, processID, now int64, ts []Transition) error {
	if len(ts) == 0 {
		return nil
	}
	if err := pipeline(ctx, tx, s.q.setJobRuns(from, processID, now, setRows(ts, now)), nil); err != nil {
		return fmt.Errorf("move jobs from %s: %w", from, err)
	}
	return nil
}

// resolveWaits gives the scheduled transitions that carry a Wait instead
// of a RunAt their run time: Wait after at, c's time in tx, which it reads
// when at is zero (one round trip on the database's clock, only when some
// transition waits and no push has read it). A negative Wait waits none,
// and no run time is after MaxRunAt (time.Time.Add saturates: no Wait
// overflows).
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
			if out[i].RunAt = at.Add(max(t.Wait, 0)); out[i].RunAt.After(MaxRunAt) {
				out[i].RunAt = MaxRunAt
			}
		}
	}
	return out, nil
}

// setRows turns transitions into SetJobs rows.
func setRows(ts []Transition, now int64) []SetRow {
	rows := make([]SetRow, len(ts))
	for i, t := range ts {
		rows[i] = SetRow{ID: t.ID, State: t.State, WaitKey: t.WaitKey, Error: t.Error, Record: t.Record, AttemptDelta: t.AttemptDelta, Claim: t.Claim}
		if !t.RunAt.IsZero() {
			rows[i].RunAt = MicrosNotBefore(t.RunAt)
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

// failedRuns are the runs of the transitions that end a run that failed
// (see Transition.failed).
func failedRuns(ts []Transition) []Run {
	var runs []Run
	for _, t := range ts {
		if t.failed() {
			runs = append(runs, t.run())
		}
	}
	return runs
}

// failed reports whether t ends a run that failed: it carries its error
// and spends its attempt (a run given back, such as one an upstream 429
// turned away, is not a failed attempt).
func (t Transition) failed() bool { return t.Error != "" && t.AttemptDelta == 0 }

// run is the run t is the outcome of.
func (t Transition) run() Run { return Run{ID: t.ID, Claim: t.Claim} }
