// Package ratelimit holds sluice's rate-limit math and declarations. It is
// pure Go: no SQL, no clock of its own. Times are integer nanoseconds
// since the Unix epoch, passed in by the caller, so every decision can be
// replayed exactly; rounding the emission interval up to the nanosecond
// slows a limit of 100,000 per second by at most one part in ten thousand.
//
// The algorithm is GCRA (the generic cell rate algorithm). For a limit of
// To per Per with a burst of b (1 ≤ b ≤ To):
//
//   - the emission interval is T = Per / (To − b + 1), rounded up to the
//     nanosecond so that rounding can never admit early;
//   - the tolerance is τ = (b − 1)·T;
//   - a budget keeps one time, its TAT (theoretical arrival time); a budget
//     that has no state has TAT = now;
//   - a job of cost c is admitted at t iff max(TAT, t) + c·T − t ≤ τ + T,
//     and then TAT ← max(TAT, t) + c·T. A denial changes nothing.
//
// This admits at most To (in cost) in any half-open window of length Per,
// lets a quiet budget admit b at once, and drains a backlog at To − b + 1
// per Per.
package ratelimit

import (
	"math"
	"math/bits"
	"time"
)

// Never is the earliest admission time of a paused limit.
const Never = int64(math.MaxInt64)

// Params is a limit reduced to what the math needs.
type Params struct {
	// Interval is the emission interval T in nanoseconds (at least
	// MinInterval).
	Interval int64
	// Burst is b: how many cost-1 jobs a quiet budget admits at once.
	Burst int
	// Paused is set for a limit of To: 0, which admits nothing.
	Paused bool
}

// Tolerance returns τ = (b − 1)·T in nanoseconds.
func (p Params) Tolerance() int64 { return int64(p.Burst-1) * p.Interval }

// State is one budget's stored state.
type State struct {
	// TAT is the theoretical arrival time, in nanoseconds.
	TAT int64
	// NextSlot is the earliest time the next deferred job may be told to
	// come back, in microseconds: one interval after the last slot handed
	// out, in nanoseconds. It never charges the budget.
	NextSlot int64
}

// Check reports whether a job of the given cost is admitted at now, and
// if not, the earliest time it could be, state unchanged. The earliest time
// is tight: the job is denied one nanosecond before it and admitted at it.
// A paused limit, a cost the limit can never admit (see Fits), or a budget
// held back to Never (see Hold) gives Never.
func (p Params) Check(s State, now int64, cost int) (ok bool, earliest int64) {
	if p.Paused || cost > p.Burst || s.TAT == Never {
		return false, Never
	}
	// max(TAT, t) + c·T − t ≤ b·T, written so that a TAT as late as
	// Never (a budget held back by Hold for longer than the times reach)
	// does not wrap round.
	if max(s.TAT, now)-now <= int64(p.Burst-cost)*p.Interval {
		return true, now
	}
	return false, s.TAT - int64(p.Burst-cost)*p.Interval
}

// Later returns t + d in nanoseconds, saturating at Never (and, for a
// negative d, at the earliest int64) rather than wrapping round: a wait
// longer than the times reach (past 2262) is as long as they reach.
func Later(t, d int64) int64 {
	switch {
	case d > 0 && t > Never-d:
		return Never
	case d < 0 && t < math.MinInt64-d:
		return math.MinInt64
	}
	return t + d
}

// Hold moves s so that nothing is admitted before until (an upstream
// asked to wait till then): its TAT to until plus the tolerance, its next
// slot to until, neither moved back. An until whose TAT would lie past
// what the times reach (past 2262) sets it to Never, which admits nothing.
func (p Params) Hold(s *State, until int64) {
	s.TAT = max(s.TAT, Later(until, p.Tolerance()))
	s.NextSlot = max(s.NextSlot, until)
}

// Fits reports whether a job of the given cost can ever be admitted: a
// cost above the burst cannot. A paused limit fits any cost (it admits
// nothing now, but may be resumed).
func (p Params) Fits(cost int) bool { return p.Paused || cost <= p.Burst }

// Charge records an admission of the given cost at now. Call it only after
// Check admitted the job. A TAT that would lie past what the times reach
// (past 2262) is Never, which admits nothing, rather than wrapping round
// to a time long past, which would admit everything.
func (p Params) Charge(s *State, now int64, cost int) {
	s.TAT = Later(max(s.TAT, now), int64(cost)*p.Interval)
}

// Allow checks and, when admitted, charges: the whole GCRA step.
func (p Params) Allow(s *State, now int64, cost int) (ok bool, earliest int64) {
	ok, earliest = p.Check(*s, now, cost)
	if ok {
		p.Charge(s, now, cost)
	}
	return ok, earliest
}

// Slot hands a deferred job the next free slot: the later of the earliest
// time it could be admitted and NextSlot. It advances NextSlot by the
// job's cost in intervals and returns the slot. It never changes TAT.
func (p Params) Slot(s *State, earliest int64, cost int) int64 {
	slot := max(earliest, s.NextSlot)
	step := p.Interval
	if p.Paused {
		step = 1
	}
	s.NextSlot = Later(slot, int64(cost)*step)
	return slot
}

// CarryDebt applies the rule for a changed limit: the debt the budget
// carries past now, d, built under prev's interval T', stands for d / T'
// cost-1 admissions, and under p's interval T it is worth d·T / T' (rounded
// up, so that a conversion can never admit early). A looser limit (see
// Loosens) thus counts the admissions made under prev as if made as late as
// they could have been, so no window of p's Per holds more than p's To, the
// change's included, and a budget that spent its old burst admits again
// within that burst's worth of new intervals. A tighter limit (a longer
// interval) counts them the same way, count for count, so that workers
// that disagree on the limit (a rolling deploy, an override not yet read
// everywhere) and convert the same debt in turn hand each other the
// admissions they made, not their time: a conversion there and back at one
// instant never lowers the debt, and a burst one worker's limit allows is
// not spent again after the other's turn.
//
// Admissions build at most a burst of intervals of debt, of prev's or (in
// a budget another limit's conversion left) of p's counted in prev's
// intervals. A debt past both holds a wait an upstream asked for (Hold):
// its time, not admissions, which no conversion multiplies or cuts short.
// Such a budget admits under p no sooner than prev would have (the wait's
// end) and no later than that or p's full burst of intervals, whichever
// comes last.
//
// After a pause (whose interval says nothing of the admissions before it)
// the debt is capped at b intervals of p instead, so admissions resume
// within one new interval. A budget held back to Never stays held.
//
// It reports whether the debt it left holds such a wait. A debt it
// counted past p's own burst of intervals (prev's burst was larger) is
// admissions all the same: a budget that stores it records the burst its
// debt stands for (Covering), so that the next conversion counts it too.
func (p Params) CarryDebt(s *State, now int64, prev Params) (wait bool) {
	if p.Paused || prev.Interval == 0 || s.TAT <= now || s.TAT == Never || p == prev {
		return false
	}
	if prev.Paused {
		s.TAT = min(s.TAT, Later(now, int64(p.Burst)*p.Interval))
		return false
	}
	d := uint64(s.TAT - now)
	count := func(d uint64) int64 { // prev's intervals counted in p's
		if p.Interval <= prev.Interval {
			return scaleDown(d, uint64(p.Interval), uint64(prev.Interval))
		}
		return scaleUp(d, uint64(p.Interval), uint64(prev.Interval))
	}
	var back int64 // p's burst of intervals counted in prev's
	if p.Interval <= prev.Interval {
		back = scaleUp(uint64(p.capacity()), uint64(prev.Interval), uint64(p.Interval))
	} else {
		back = scaleDown(uint64(p.capacity()), uint64(prev.Interval), uint64(p.Interval))
	}
	room := max(prev.capacity(), back)
	if d <= uint64(room) {
		s.TAT = Later(now, count(d))
		return false
	}
	// A wait: from its end, as prev would have admitted, under p.
	s.TAT = max(Later(s.TAT-prev.Tolerance(), p.Tolerance()), Later(now, count(uint64(room))))
	return true
}

// Covering returns p with its burst raised, if need be, to cover the debt
// s carries past now as admissions, just after CarryDebt converted it: the
// limit a budget records when a conversion left it owing more intervals
// than p's burst. A budget whose debt p's burst covers records p; so does
// one that owes past it by no more than a conversion rounds up (a
// microsecond).
func (p Params) Covering(s State, now int64) Params {
	if p.Paused || p.Interval <= 0 || s.TAT == Never || s.TAT-now <= p.capacity()+int64(time.Microsecond) {
		return p
	}
	n := (s.TAT - now - int64(time.Microsecond) + p.Interval - 1) / p.Interval
	if n > int64(p.Burst) {
		p.Burst = int(min(n, math.MaxInt32))
	}
	return p
}

// capacity is the most debt admissions can build, b·T, saturating at
// Never.
func (p Params) capacity() int64 {
	if p.Burst > 0 && p.Interval > Never/int64(p.Burst) {
		return Never
	}
	return int64(p.Burst) * p.Interval
}

// scaleDown returns ⌈d·num/den⌉ for num ≤ den, without overflow: the
// result is at most d.
func scaleDown(d, num, den uint64) int64 {
	hi, lo := bits.Mul64(d, num)
	q, r := bits.Div64(hi, lo, den) // hi < den since num ≤ den
	if r > 0 {
		q++
	}
	return int64(q)
}

// scaleUp returns ⌈d·num/den⌉ for num ≥ den, or Never's worth when that
// lies past what the times reach.
func scaleUp(d, num, den uint64) int64 {
	hi, lo := bits.Mul64(d, num)
	if hi >= den {
		return Never
	}
	q, r := bits.Div64(hi, lo, den)
	if r > 0 {
		q++
	}
	if q > uint64(Never) {
		return Never
	}
	return int64(q)
}

// Loosens reports whether p admits faster than prev, the limit a state was
// built under: a shorter interval, or any limit after a pause. It is false
// when prev is unknown (a zero interval: the state was never charged) and
// when p is paused.
func (p Params) Loosens(prev Params) bool {
	if p.Paused || prev.Interval == 0 {
		return false
	}
	return prev.Paused || p.Interval < prev.Interval
}

// Idle reports whether a budget in this state admits exactly as a missing
// one would at now: its TAT has passed and it has no slot handed out ahead.
// Such a row may be deleted without changing any decision.
func Idle(s State, now int64) bool { return s.TAT <= now && s.NextSlot <= now }
