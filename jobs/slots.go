package jobs

import (
	"container/heap"
	"sync"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// maxKnownSlots bounds how many coming slots a worker remembers; past it,
// the dispatcher and the worker's polls bring the rest.
const maxKnownSlots = 100_000

// slotTimes is a min-heap of times.
type slotTimes []time.Time

func (h slotTimes) Len() int           { return len(h) }
func (h slotTimes) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h slotTimes) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *slotTimes) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *slotTimes) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// dueSlots is what a worker knows of the slots its own claims handed out:
// the deferred jobs' and those given to parked jobs. At each slot the
// worker claims again, taking the job that waited for it, so that a
// backlog drains at its limit's pace rather than at the dispatcher's
// tick. Slots are on the clock the claims decide on (the database's, in
// production); offset turns them into the worker's own clock.
type dueSlots struct {
	mu    sync.Mutex
	times slotTimes
	// offset is the worker's clock minus the claims' clock, as last
	// measured around a claim.
	offset time.Duration
	// lead is how early the worker wakes for a slot: about as long as its
	// claims take to decide (see learn), between minDueLead and maxDueLead,
	// when claims decide on the database's clock (and so can wait for a
	// slot); else 0.
	lead time.Duration
	// took is how long claims take to decide: the longest lately, decaying.
	took time.Duration
	// notBefore is when, on the worker's clock, the earliest slot comes by
	// the claims' own clock, as the last claim that looked for due jobs
	// measured it: waking before would find nothing due.
	notBefore time.Time
}

// note records what a claim handed out and measures the clocks' offset:
// began and ended are the worker's times around the claim.
func (d *dueSlots) note(res *engine.ClaimResult, began, ended time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if at := res.DecidedAt; !at.IsZero() {
		// The clock was read Ahead before the time decided as of.
		d.offset = began.Add(ended.Sub(began) / 2).Sub(at.Add(-res.Ahead))
		d.learn(ended.Sub(began))
	}
	if !res.DueAt.IsZero() {
		for len(d.times) > 0 && !d.times[0].After(res.DueAt) {
			heap.Pop(&d.times) // the claim took every job due by then
		}
		if len(d.times) > 0 {
			d.notBefore = ended.Add(d.times[0].Sub(res.DueAt))
		}
	}
	for _, defs := range [][]engine.Deferral{res.Deferred, res.Displaced} {
		for _, def := range defs {
			if !def.Parked {
				d.add(def.Until)
			}
		}
	}
	for _, t := range res.Unparked {
		d.add(t)
	}
}

// learn sets the lead from how long a claim that decided rate limits
// took: a worker that wakes for a slot at least that early reaches the
// decision before the slot, and the claim admits the job as of the slot,
// holding it until then (engine.Job.Hold). A limit with no burst to
// spare loses every moment an admission comes late, so the lead follows
// the slowest recent claim and forgets it slowly. The whole claim is
// measured, commit included: the decision comes before it ends.
func (d *dueSlots) learn(took time.Duration) {
	if d.lead == 0 {
		return // claims decide on the worker's clock and cannot wait
	}
	d.took = max(took, d.took-d.took/16)
	d.lead = min(max(d.took+time.Millisecond, minDueLead), maxDueLead)
}

// leadTime returns the current lead.
func (d *dueSlots) leadTime() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lead
}

// addAll records slots handed out outside a claim (a worker's sweep).
func (d *dueSlots) addAll(ts []time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range ts {
		d.add(t)
	}
}

func (d *dueSlots) add(t time.Time) {
	if len(d.times) < maxKnownSlots {
		heap.Push(&d.times, t)
	}
}

// next returns how long until lead before the earliest known slot, on
// the worker's clock now, and whether there is one.
func (d *dueSlots) next(now time.Time) (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.times) == 0 {
		return 0, false
	}
	return max(d.times[0].Add(d.offset-d.lead).Sub(now), d.notBefore.Sub(now), 0), true
}

// due reports whether a known slot has come by now on the worker's clock.
func (d *dueSlots) due(now time.Time) bool {
	wait, ok := d.next(now)
	return ok && wait == 0
}
