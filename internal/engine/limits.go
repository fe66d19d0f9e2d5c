package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sluicequeue/sluice/ratelimit"
)

// check is one budget a candidate must pass.
type check struct {
	key  string
	spec ratelimit.Spec
	cost int
}

// applyLimits decides the locked candidates against their budgets, in
// candidate order. It locks the budgets (sorted by key), reads the time
// after the locks, charges every budget of each admitted job, and gives
// each denied job a slot on the budget that holds it longest, or parks it
// there when that budget's slots reach past the horizon. A job whose cost
// one of its limits can never admit (an override lowered the burst below
// it) fails at once, naming the limit. It returns the admitted jobs and
// the statements that write the budgets and the deferred and failed jobs,
// the jobs that give their concurrency slots back, and records the
// decision time in res. Candidates without a limit cost nothing: with none
// among them it runs no statement at all.
func (s *Store) applyLimits(ctx context.Context, tx Tx, p ClaimParams, cands []*Job, res *ClaimResult) ([]*Job, []Stmt, holders, error) {
	checks := make([][]check, len(cands))
	var keys []string
	queueLimits := map[string][]QueueLimit{}
	for i, j := range cands {
		for _, rk := range j.RateKeys {
			spec, ok := p.Limits.RateSpec(j.Kind, rk.Key)
			if !ok {
				continue
			}
			checks[i] = append(checks[i], check{key: rk.Key, spec: spec, cost: rk.Cost})
			keys = append(keys, rk.Key)
		}
		ql, seen := queueLimits[j.Queue]
		if !seen {
			ql = p.Limits.QueueLimits(j.Queue)
			queueLimits[j.Queue] = ql
		}
		for _, l := range ql {
			checks[i] = append(checks[i], check{key: l.Key, spec: l.Spec, cost: 1})
			keys = append(keys, l.Key)
		}
	}
	if len(keys) == 0 {
		return cands[:min(len(cands), p.Max)], nil, nil, nil
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var budgets map[string]*budget
	var at time.Time
	var marked []int64
	var err error
	yield := s.yields(res, checks)
	switch {
	case res.snapshot:
		budgets, at, marked, err = s.snapshotBudgets(ctx, tx, keys, p, cands, checks, res)
	case yield:
		budgets, at, err = s.lockUnheldBudgets(ctx, tx, keys, p, res)
	default:
		budgets, at, err = s.lockClaimBudgets(ctx, tx, keys, p, res)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if yield {
		cands, checks, keys = yieldHeld(cands, checks, keys, budgets, res)
	}
	res.Budgets = keys
	if ahead := imminent(p, cands, checks, budgets, Nanos(at)); ahead > 0 {
		// A job that came for its slot a moment early is admitted at its
		// slot, not a whole wake-up later: the claim decides as of the
		// slot, and the jobs it admits under a limit start then
		// (Job.Hold). It holds no lock while they wait.
		res.Ahead = time.Duration(ahead)
		at = at.Add(res.Ahead)
	}
	res.DecidedAt = at
	now, err := budgetNow(at)
	if err != nil {
		return nil, nil, nil, err
	}
	horizon := horizonOr(p.Horizon)
	until := ratelimit.Later(now, horizon.Nanoseconds())

	admitted := make([]*Job, 0, min(len(cands), p.Max))
	var deferred, failed, displaced []SetRow
	gives := holders{} // deferred and failed jobs give their concurrency slots back
	for i, j := range cands {
		full := len(admitted) == p.Max // past Max, only deferrals are taken
		cs := checks[i]
		if len(cs) == 0 {
			if !full {
				admitted = append(admitted, j)
			}
			continue
		}
		var holder, shadowed, unfit *check
		var latest int64
		for k := range cs {
			c := &cs[k]
			b := budgets[c.key]
			b.prepare(c.spec.Params, now, until)
			ok, earliest := c.spec.Params.Check(b.state, now, c.cost)
			switch {
			case ok:
			case c.spec.Shadow:
				if shadowed == nil {
					shadowed = c
				}
			case !c.spec.Params.Fits(c.cost):
				unfit = c
			case holder == nil || earliest > latest:
				holder, latest = c, earliest
			}
		}
		if unfit != nil {
			// No slot would ever admit it: fail it now, where an operator
			// sees why, instead of sending it round forever.
			msg := unfitError(unfit)
			failed = append(failed, SetRow{ID: j.ID, State: StateFailed, Error: msg, FinishedAt: Micros(at)})
			res.Unfit = append(res.Unfit, Unfit{JobID: j.ID, Kind: j.Kind, Key: unfit.key, Cost: unfit.cost, Burst: unfit.spec.Burst})
			if j.HoldsSlot {
				gives[j.ID] = j.ConcKey
			}
			continue
		}
		if holder == nil && full {
			continue // it would be admitted, but the claim is full: it stays ready
		}
		if holder == nil {
			// Admitted: charge every budget that admitted it. A shadow
			// limit that would have denied is not charged, as a denial
			// never is.
			for _, c := range cs {
				b := budgets[c.key]
				if ok, _ := c.spec.Params.Check(b.state, now, c.cost); ok {
					if j.WaitKey != c.key && b.state.NextSlot > now {
						// It takes room the budget's slotted jobs were
						// to have: one that came for its slot in this
						// claim will find the budget spent.
						b.taken = append(b.taken, j.Priority)
					}
					c.spec.Params.Charge(&b.state, now, c.cost)
					b.dirty = true
				}
			}
			if shadowed != nil {
				res.Shadowed = append(res.Shadowed, Deferral{JobID: j.ID, Kind: j.Kind, Key: shadowed.key})
			}
			j.Hold = res.Ahead
			admitted = append(admitted, j)
			continue
		}
		b := budgets[holder.key]
		d := Deferral{JobID: j.ID, Kind: j.Kind, Key: holder.key}
		var slot int64
		var ok bool
		// Did it come back for its slot on this budget, which can take it
		// within one of its costs after that slot? (See below.)
		returning := j.WaitKey == holder.key && !holder.spec.Params.Paused && latest < b.state.NextSlot && latest <= until &&
			latest-Nanos(j.RunAt) <= int64(holder.cost)*holder.spec.Params.Interval
		if i := slices.IndexFunc(b.taken, func(prio int) bool { return prio < j.Priority }); returning && i >= 0 {
			// A more urgent job that held no slot took the room it came
			// for, in this claim: it is displaced, as if that job had
			// taken its slot, instead of riding at the head of the line
			// and pushing every slot behind it back in turn.
			b.taken = slices.Delete(b.taken, i, i+1)
			returning = false
		}
		if returning {
			// It came back for its slot on this budget and found it not
			// quite ready (the admission before it came a little late):
			// it keeps its place at the head of the line, at the exact
			// time it can be admitted, instead of going to the back. Jobs
			// that return together queue there one cost apart, so that they
			// do not all come back at one instant for one admission. A
			// budget that has slipped further behind its slots has passed
			// those of the jobs behind it: the job goes to the back rather
			// than take one of theirs, which would send that job round in
			// turn, claim after claim.
			slot, ok = max(latest, b.comeback), true
			b.comeback = ratelimit.Later(slot, int64(holder.cost)*holder.spec.Params.Interval)
		} else {
			// A job more urgent than one slotted ahead takes its slot.
			var moves []SetRow
			var moved []Deferral
			slot, moves, moved, ok, err = s.takeSlot(ctx, tx, b, holder, j.Priority, latest, now, until)
			if err != nil {
				return nil, nil, nil, err
			}
			if ok {
				displaced = append(displaced, moves...)
				res.Displaced = append(res.Displaced, moved...)
			} else {
				b.slotted(j.Priority, now)
				slot, ok = slotFor(b, holder.spec.Params, latest, now, until, holder.cost)
			}
		}
		if ok {
			d.Until = FromNanos(slot)
			deferred = append(deferred, SetRow{ID: j.ID, State: StateScheduled, RunAt: microsAfter(slot), WaitKey: holder.key, Deferral: deferralReason(holder.key, false)})
		} else {
			d.Parked = true
			b.row.Parked++
			b.parkedNow = true
			deferred = append(deferred, SetRow{ID: j.ID, State: StateParked, WaitKey: holder.key, Deferral: deferralReason(holder.key, true)})
		}
		if !j.HoldsSlot && (d.Parked || res.MoreLimited) {
			// More jobs like it are likely ready behind it: they would
			// all wait, and are better deferred in bulk.
			res.noteOverflow(Overflow{Queue: j.Queue, Kind: j.Kind, RateKeys: EncodeRateKeys(j.RateKeys), Key: holder.key})
		}
		b.dirty = true
		res.Deferred = append(res.Deferred, d)
		if j.HoldsSlot {
			gives[j.ID] = j.ConcKey
		}
	}
	unparked, err := s.unparkLocked(ctx, tx, keys, budgets, now, ratelimit.Later(until, horizon.Nanoseconds()/10), res)
	if err != nil {
		return nil, nil, nil, err
	}
	if marked != nil {
		if err := checkSnapshot(marked, admitted, len(deferred)+len(failed)+len(unparked)+len(displaced), res); err != nil {
			return nil, nil, nil, err
		}
		res.marked = true
	}
	var writes []Stmt
	writes = append(writes, s.saveBudgets(budgets, Micros(at))...)
	if moved := append(deferred, failed...); len(moved) > 0 {
		writes = append(writes, s.q.setJobRuns(StateReady, 0, Micros(at), moved)...)
	}
	if len(unparked) > 0 {
		writes = append(writes, s.q.setJobRuns(StateParked, 0, Micros(at), unparked)...)
	}
	if len(displaced) > 0 {
		writes = append(writes, s.q.setJobRuns(StateScheduled, 0, Micros(at), displaced)...)
	}
	return admitted, writes, gives, nil
}

// maxUnparkPerClaim bounds the parked jobs one claim hands slots to.
const maxUnparkPerClaim = 8

// DefaultUnparkBatch is how many parked jobs one Unpark moves at most when
// its caller does not say.
const DefaultUnparkBatch = 1000

// unparkLocked hands slots to parked jobs of the budgets a claim holds
// locked, when their slots come within until, and records the slots in
// res: the worker that drains a budget thus learns when to come back for
// every job it will admit, including those that waited past the horizon.
// Claims look a little further ahead (until) than the dispatcher does, so
// that a budget workers are draining is seldom left to the dispatcher's
// coarser tick. A paused queue's parked jobs are passed over
// (LockParked): a slot handed to one would keep the budget's other jobs
// waiting behind a job that cannot run. A paused budget is left to the
// dispatcher, and so is one this claim parked jobs on: its slots lie past
// the horizon, and the count of its parked jobs is not in the database
// until the claim's writes are.
func (s *Store) unparkLocked(ctx context.Context, tx Tx, keys []string, budgets map[string]*budget, now, until int64, res *ClaimResult) ([]SetRow, error) {
	var moves []SetRow
	for _, k := range keys {
		b := budgets[k]
		if b.row.Parked == 0 || b.parkedNow || b.params().Paused {
			continue
		}
		got, err := s.unparkBudget(ctx, tx, b, now, until, maxUnparkPerClaim)
		if err != nil {
			return nil, err
		}
		for _, m := range got {
			res.Unparked = append(res.Unparked, FromMicros(m.RunAt))
		}
		moves = append(moves, got...)
	}
	return moves, nil
}

// imminent returns how far ahead (ns) the claim decides so that a
// returning job — one that waited on a budget and was taken for its slot,
// up to DueLead early — is admissible, when that is within DueLead; 0
// otherwise. It only applies on the database's clock: on the caller's (a
// test's fixed or fake time) a claim decides at the time it is given.
// Budgets are prepared for the limits they are checked under.
func imminent(p ClaimParams, cands []*Job, checks [][]check, budgets map[string]*budget, now int64) int64 {
	if !p.PromoteDue || p.DueLead <= 0 || !p.Clock.Database() {
		return 0
	}
	var wait int64
	until := ratelimit.Later(now, horizonOr(p.Horizon).Nanoseconds())
	for i, j := range cands {
		if j.WaitKey == "" {
			continue
		}
		var latest int64
		for _, c := range checks[i] {
			b := budgets[c.key]
			b.prepare(c.spec.Params, now, until)
			if ok, earliest := c.spec.Params.Check(b.state, now, c.cost); !ok && !c.spec.Shadow {
				latest = max(latest, earliest)
			}
		}
		if d := latest - now; d > 0 && d <= p.DueLead.Nanoseconds() {
			wait = max(wait, d)
		}
	}
	return wait
}

// lockClaimBudgets locks the budgets a claim decides on, in key order, and
// reads the time after the last lock: the budgets the hint locked already
// (with the clock read after them), and the rest after them when they all
// sort after the hinted ones. A budget the hint missed that sorts before
// one it locked would break the one global order budgets are locked in, so
// the claim waits for none such: it takes them first, if no one holds them
// (lockFreeBudgets), and otherwise starts again without the hint; then it
// locks the rest in order. Where the transaction holds the only write lock
// (SQLite) order does not matter, and it reads them all as the rest.
func (s *Store) lockClaimBudgets(ctx context.Context, tx Tx, keys []string, p ClaimParams, res *ClaimResult) (map[string]*budget, time.Time, error) {
	if res.hinted == nil {
		return s.lockBudgets(ctx, tx, keys, p.Clock)
	}
	var missing []string
	for _, k := range keys {
		if res.hinted[k] == nil {
			missing = append(missing, k)
		}
	}
	at := res.hintedAt
	if at.IsZero() {
		at = p.Clock.Host()
	}
	budgets := res.hinted
	last := lastKey(res.hinted)
	early := 0 // how many sort before a hinted one
	if s.d.Capabilities().RowLocks {
		early, _ = slices.BinarySearch(missing, last)
	}
	for i, part := range [][]string{missing[:early], missing[early:]} {
		if len(part) == 0 {
			continue
		}
		lock := s.lockBudgets
		if i == 0 {
			// Waiting for these, out of key order, could deadlock: they
			// are taken only if no one holds them.
			lock = s.lockFreeBudgets
		}
		more, moreAt, err := lock(ctx, tx, part, p.Clock)
		if err != nil {
			return nil, time.Time{}, err
		}
		for k, b := range more {
			budgets[k] = b
		}
		at = moreAt
	}
	return budgets, at, nil
}

// Unfit is a job failed at claim because one of its limits can never
// admit its cost.
type Unfit struct {
	JobID int64
	Kind  string
	// Key is the budget, Cost the job's cost on it and Burst the most the
	// limit admits at once.
	Key   string
	Cost  int
	Burst int
}

// unfitError is the error an unfit job fails with.
func unfitError(c *check) string {
	return fmt.Sprintf("rate limit %s (%s): the job costs %d, more than the burst of %d, so no slot could ever admit it; "+
		"raise the limit's burst (sluice limits set) and retry the job", c.key, c.spec, c.cost, c.spec.Burst)
}

// slotFor gives a denied job of the given cost the next free slot on the
// budget that holds it, or reports false when the slot falls past the
// horizon (the job parks). A paused budget sends one job back at the
// horizon as a probe, so that lifting the pause is noticed within it, and
// parks the rest. Times are nanoseconds.
func slotFor(b *budget, p ratelimit.Params, earliest, now, until int64, cost int) (int64, bool) {
	if p.Paused {
		if b.state.NextSlot > now {
			return 0, false // a probe is out
		}
		b.state.NextSlot = until // the probe's own slot: when it returns, it probes again
		return until, true
	}
	if max(earliest, b.state.NextSlot) > until {
		// No slot is handed out before earliest, so the cursor may move
		// there: the dispatcher then sees at once that nothing is due.
		b.state.NextSlot = max(b.state.NextSlot, earliest)
		return 0, false
	}
	return p.Slot(&b.state, earliest, cost), true
}

// Unpark hands slots within the horizon to parked jobs, in priority and
// id order (fair jobs by virtual start: mergeParked), passing over those
// of paused queues, for up to limit budgets whose next slot has come
// within it and that have a parked job of a queue not paused (or none: a
// count that ran ahead is corrected), and returns how many jobs it
// scheduled: at most most (DefaultUnparkBatch when 0), so that one
// transaction never moves more than a batch of rows however many budgets
// are due — a limit raised over a hundred backlogs would otherwise unpark a
// thousand jobs of each at once, holding all hundred budgets, which the
// claims wait for, until it commits. A call that returns most may have left
// due jobs parked: callers call again. The dispatcher runs it every poll.
func (s *Store) Unpark(ctx context.Context, c Clock, horizon time.Duration, limit, most int) (int, error) {
	horizon = horizonOr(horizon)
	if most <= 0 {
		most = DefaultUnparkBatch
	}
	total := 0
	err := s.inTx(ctx, func(tx Tx) error {
		total = 0
		at, err := s.now(ctx, tx, c)
		if err != nil {
			return err
		}
		// Past the budgets' times every parked budget is due: without
		// any, nothing is decided, and a queue without limits never sees
		// the error.
		now := Nanos(at)
		until := ratelimit.Later(now, horizon.Nanoseconds())
		q, args := s.q.LockParkedBudgets(until, limit)
		rows, err := queryBudgets(ctx, tx, q, args)
		if err != nil {
			return fmt.Errorf("lock parked budgets: %w", err)
		}
		if _, err := budgetNow(at); err != nil && len(rows) > 0 {
			return err
		}
		budgets := make(map[string]*budget, len(rows))
		var moves []SetRow
		for _, r := range rows {
			if len(moves) == most {
				break // the rest are left to the next call, unchanged
			}
			b := loaded(r)
			budgets[r.Name] = b
			got, err := s.unparkBudget(ctx, tx, b, now, until, most-len(moves))
			if err != nil {
				return err
			}
			moves = append(moves, got...)
		}
		var writes []Stmt
		if len(moves) > 0 {
			writes = append(writes, s.q.setJobRuns(StateParked, 0, Micros(at), moves)...)
		}
		writes = append(writes, s.saveBudgets(budgets, Micros(at))...)
		total = len(moves)
		if err := pipeline(ctx, tx, writes, nil); err != nil {
			return fmt.Errorf("schedule parked jobs: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, s.wrap(fmt.Errorf("unpark: %w", err))
	}
	return total, nil
}

// unparkBudget schedules up to most parked jobs of one locked budget into
// the slots that fall within until, each as many intervals wide as its
// cost on this budget. Times are nanoseconds.
//
// The budget's parked count may run ahead of its parked jobs (a parked
// job that a full coalescing call dispatched; an operator's cancel or
// retry takes its job off the count, uncountParked), never behind: the
// count is what brings the dispatcher back to the budget, so a parked job
// the count forgot would wait forever. So when the jobs it finds to lock fall short
// of what it asked for — some left, or are locked by another transaction
// (a coalescing join, a caller's EnqueueTx, an operator's cancel), or wait
// for their paused queue to resume, which LockParked passes over — it
// counts the budget's parked jobs again, locked, paused or not, before it
// lowers the count.
func (s *Store) unparkBudget(ctx context.Context, tx Tx, b *budget, now, until int64, most int) ([]SetRow, error) {
	p := b.params()
	first := max(b.state.NextSlot, now)
	want := 1
	if p.Paused && b.state.NextSlot > now {
		return nil, nil // a probe is out; it will notice when the pause lifts
	}
	if !p.Paused {
		first = max(first, b.state.TAT-p.Tolerance())
		if first > until {
			// No slot is handed out before first, so the cursor moves
			// there, as slotFor moves it: left within the horizon, the
			// budget would come first in the dispatcher's line at every
			// tick for nothing, ahead of the budgets behind it.
			if first > b.state.NextSlot {
				b.state.NextSlot = first
				b.dirty = true
			}
			return nil, nil
		}
		want = int((until-first)/p.Interval) + 1
	}
	want = min(want, max(b.row.Parked, 1), most)
	q, args := s.q.LockParked(b.row.Name, want)
	parked, err := s.queryParked(ctx, tx, q, args, b.row.Name)
	if err != nil {
		return nil, fmt.Errorf("lock parked jobs of %s: %w", b.row.Name, err)
	}
	parked = mergeParked(parked, want)
	b.dirty = true
	left := b.row.Parked - len(parked)
	if len(parked) < want {
		q, args := s.q.CountParked(b.row.Name)
		n, err := queryInt64s(ctx, tx, q, args)
		if err != nil {
			return nil, fmt.Errorf("count parked jobs of %s: %w", b.row.Name, err)
		}
		left = int(n[0]) - len(parked) // the count includes the ones locked here
	}
	b.row.Parked = max(left, 0)
	moves := make([]SetRow, 0, len(parked))
	for _, j := range parked {
		if !p.Paused && max(first, b.state.NextSlot) > until {
			break // the horizon is full: the rest wait for the next round
		}
		var slot int64
		b.slotted(j.priority, now)
		if p.Paused {
			slot = until
			b.state.NextSlot = until
		} else {
			slot = p.Slot(&b.state, first, j.cost)
		}
		moves = append(moves, SetRow{ID: j.id, State: StateScheduled, RunAt: microsAfter(slot), WaitKey: b.row.Name})
	}
	b.row.Parked += len(parked) - len(moves)
	return moves, nil
}

// parkedJob is a parked job as unparking sees it: its id, its cost on
// the budget, its priority, and, for a fair job, its virtual start.
type parkedJob struct {
	id       int64
	cost     int
	priority int
	fair     bool
	start    int64
}

// queryParked reads LockParked's rows: id, rate keys, from which each
// job's cost on the budget key is taken, priority, virtual start and
// whether the job is fair.
func (s *Store) queryParked(ctx context.Context, ex Executor, q string, args []any, key string) ([]parkedJob, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []parkedJob
	for rows.Next() {
		var j parkedJob
		var rateKeys nullString
		var start nullInt64
		var fair int64
		if err := rows.Scan(&j.id, &rateKeys, &j.priority, &start, &fair); err != nil {
			return nil, err
		}
		j.cost = costOn(rateKeys.String, key)
		j.fair, j.start = fair == 1, start.Int64
		out = append(out, j)
	}
	return out, rows.Err()
}

// mergeParked returns the first most of a budget's parked jobs in the
// order they get slots: each stream in its own order — jobs without a
// fairness key by priority and id, fair ones by priority, virtual start
// and id (docs/fairness.md) — merged at their heads by priority and id,
// as a claim merges its ready streams. Priorities come first either way.
func mergeParked(jobs []parkedJob, most int) []parkedJob {
	var plain, fair []parkedJob
	for _, j := range jobs {
		if j.fair {
			fair = append(fair, j)
		} else {
			plain = append(plain, j)
		}
	}
	byID := func(a, b parkedJob) int { return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.id, b.id)) }
	slices.SortFunc(plain, byID)
	slices.SortFunc(fair, func(a, b parkedJob) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.start, b.start), cmp.Compare(a.id, b.id))
	})
	out := make([]parkedJob, 0, min(len(jobs), most))
	for len(out) < most && (len(plain) > 0 || len(fair) > 0) {
		if len(plain) == 0 || len(fair) > 0 && byID(fair[0], plain[0]) < 0 {
			out, fair = append(out, fair[0]), fair[1:]
		} else {
			out, plain = append(out, plain[0]), plain[1:]
		}
	}
	return out
}
