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

// takeSlot gives job j, deferred on budget b (its holder c) and admissible
// from earliest on, the slot of the earliest job slotted there at earliest
// or later that is less urgent than j, when there is one: it returns that
// slot, and the move of the job it displaced, which takes the budget's next
// free slot or parks. It returns false, and does nothing, when j is no more
// urgent than any job slotted ahead, when the budget is paused, or when no
// such job can be locked. Times are nanoseconds.
func (s *Store) takeSlot(ctx context.Context, tx Tx, b *budget, c *check, j *Job, earliest, now, until int64) (int64, SetRow, Deferral, bool, error) {
	p := c.spec.Params
	if p.Paused || j.Priority >= b.lowest(now) {
		return 0, SetRow{}, Deferral{}, false, nil
	}
	// The jobs this claim displaced already still show their old slots
	// (the writes come at the end): ask for one more than them.
	q, args := s.q.LockSlotted(c.key, microsAfter(max(earliest, now+1)), j.Priority, len(b.displaced)+1)
	found, err := s.querySlotted(ctx, tx, q, args, c.key)
	if err != nil {
		return 0, SetRow{}, Deferral{}, false, fmt.Errorf("lock slotted jobs of %s: %w", c.key, err)
	}
	i := slices.IndexFunc(found, func(d slottedJob) bool { return !slices.Contains(b.displaced, d.id) })
	if i < 0 {
		if len(b.displaced) == 0 {
			// Nothing less urgent is slotted ahead: the next job of this
			// priority need not look again.
			b.row.SlottedPriority = j.Priority
			b.dirty = true
		}
		return 0, SetRow{}, Deferral{}, false, nil
	}
	d := found[i]
	b.displaced = append(b.displaced, d.id)
	slot := d.runAt * 1000
	def := Deferral{JobID: d.id, Kind: d.kind, Key: c.key}
	move := SetRow{ID: d.id, State: StateScheduled, WaitKey: c.key}
	b.slotted(d.priority, now)
	if next, ok := slotFor(b, p, slot, now, until, d.cost); ok {
		def.Until, move.RunAt = FromNanos(next), microsAfter(next)
	} else {
		def.Parked, move.State = true, StateParked
		b.row.Parked++
		b.parkedNow = true
	}
	move.Deferral = deferralReason(c.key, def.Parked)
	b.dirty = true
	return slot, move, def, true, nil
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
