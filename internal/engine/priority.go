package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
)

// Priority inside a rate limit. A budget hands its slots out in the order
// jobs are deferred on it, so without more an urgent job deferred behind a
// backlog would wait for all of it. Instead a job deferred on a budget that
// has slotted less urgent jobs ahead takes the slot of the earliest of them,
// and that job takes the next free slot (or parks): one more row moves, and
// the urgent job is admitted next. The budget remembers the least urgent
// priority it slotted (BudgetRow.SlottedPriority), so a claim looks for a
// slot to take only when it defers a job more urgent than that: a budget
// whose jobs share one priority never runs the look-up.

// noPriority is below every priority a job can have: the least urgent
// slotted priority of a budget with no slots ahead.
const noPriority = math.MinInt32

// lowest returns the least urgent priority among the jobs slotted on the
// budget ahead of now (ns), or noPriority when no slot lies ahead.
func (b *budget) lowest(now int64) int {
	if b.state.NextSlot <= now {
		return noPriority
	}
	return b.row.SlottedPriority
}

// slotted records that a job of priority prio takes a slot of the budget
// at now (ns). Call it before the slot is handed out.
func (b *budget) slotted(prio int, now int64) {
	if m := max(b.lowest(now), prio); m != b.row.SlottedPriority {
		b.row.SlottedPriority = m
		b.dirty = true
	}
}

// slottedJob is a job LockSlotted found: one whose slot a more urgent job
// may take.
type slottedJob struct {
	id       int64
	kind     string
	runAt    int64 // µs
	priority int
	cost     int
}

// takeSlot gives a job of priority prio, deferred on budget b (its holder
// c) and admissible from earliest on, the slot of the earliest job slotted
// there at earliest or later that is less urgent, when there is one. The
// displaced job does the same in turn — it takes the slot of the earliest
// job slotted after it that is less urgent than it — and the last one
// takes the budget's next free slot or parks: no job waits behind a less
// urgent one, and each step moves one row to a strictly less urgent
// priority, so a deferral moves at most one row per priority level slotted
// ahead. It returns the slot and the moves and deferrals of the displaced
// jobs, or false, doing nothing, when the job is no more urgent than any
// job slotted ahead, the budget is paused, or no such job can be locked.
// Times are nanoseconds.
func (s *Store) takeSlot(ctx context.Context, tx Tx, b *budget, c *check, prio int, earliest, now, until int64) (int64, []SetRow, []Deferral, bool, error) {
	p := c.spec.Params
	if p.Paused {
		return 0, nil, nil, false, nil
	}
	d, ok, err := s.lessUrgent(ctx, tx, b, c.key, prio, earliest, now)
	if !ok || err != nil {
		return 0, nil, nil, false, err
	}
	slot := Nanos(FromMicros(d.runAt))
	var moves []SetRow
	var defs []Deferral
	for {
		def := Deferral{JobID: d.id, Kind: d.kind, Key: c.key}
		move := SetRow{ID: d.id, State: StateScheduled, WaitKey: c.key}
		next, found, err := s.lessUrgent(ctx, tx, b, c.key, d.priority, Nanos(FromMicros(d.runAt)), now)
		if err != nil {
			return 0, nil, nil, false, err
		}
		if found {
			def.Until, move.RunAt = FromMicros(next.runAt), next.runAt
		} else {
			b.slotted(d.priority, now)
			if at, ok := slotFor(b, p, Nanos(FromMicros(d.runAt)), now, until, d.cost); ok {
				def.Until, move.RunAt = FromNanos(at), microsAfter(at)
			} else {
				def.Parked, move.State = true, StateParked
				b.row.Parked++
				b.parkedNow = true
			}
		}
		move.Deferral = deferralReason(c.key, def.Parked)
		moves, defs = append(moves, move), append(defs, def)
		if !found {
			break
		}
		d = next
	}
	b.dirty = true
	return slot, moves, defs, true, nil
}

// lessUrgent locks the earliest job slotted on budget b at earliest (ns)
// or later, and after now, that is less urgent than prio and that this
// transaction has not displaced yet, and records it as displaced. It looks
// only when the budget has slotted a less urgent job ahead; when it finds
// none and has displaced none, it lowers the budget's record to prio, so
// the next job of this priority does not look again.
func (s *Store) lessUrgent(ctx context.Context, tx Tx, b *budget, key string, prio int, earliest, now int64) (slottedJob, bool, error) {
	if prio >= b.lowest(now) {
		return slottedJob{}, false, nil
	}
	// The jobs this transaction displaced still show their old slots (the
	// writes come at the end): ask for one more than them.
	q, args := s.q.LockSlotted(key, microsAfter(max(earliest, now+1)), prio, len(b.displaced)+1)
	found, err := s.querySlotted(ctx, tx, q, args, key)
	if err != nil {
		return slottedJob{}, false, fmt.Errorf("lock slotted jobs of %s: %w", key, err)
	}
	i := slices.IndexFunc(found, func(d slottedJob) bool { return !slices.Contains(b.displaced, d.id) })
	if i < 0 {
		if len(b.displaced) == 0 {
			b.row.SlottedPriority = prio
			b.dirty = true
		}
		return slottedJob{}, false, nil
	}
	b.displaced = append(b.displaced, found[i].id)
	return found[i], true, nil
}

// querySlotted reads LockSlotted's rows, taking each job's cost on the
// budget key from its rate keys.
func (s *Store) querySlotted(ctx context.Context, ex Executor, q string, args []any, key string) ([]slottedJob, error) {
	rows, err := ex.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []slottedJob
	for rows.Next() {
		var d slottedJob
		var rateKeys nullString
		if err := rows.Scan(&d.id, &d.kind, &d.runAt, &d.priority, &rateKeys); err != nil {
			return nil, err
		}
		d.cost = costOn(rateKeys.String, key)
		out = append(out, d)
	}
	return out, rows.Err()
}

// costOn returns a job's cost on the budget key, from its stored rate keys;
// 1 when it does not name the key.
func costOn(rateKeys, key string) int {
	for _, rk := range DecodeRateKeys(rateKeys) {
		if rk.Key == key {
			return rk.Cost
		}
	}
	return 1
}
