package engine

import (
	"slices"
	"sync"
)

// sweepHub records the budgets whose overflow a goroutine of this process
// is deferring (DeferOverflow), and the queues they are in, so that the
// workers sharing a store sweep each budget once and leave a queue's
// rate-limited jobs to its sweep meanwhile: two sweeps of one budget would
// only race for its slot cursor, each losing a batch's work in turn.
type sweepHub struct {
	mu     sync.Mutex
	keys   map[string]bool
	queues map[string]int
}

// StartSweep reports whether the caller is to sweep the overflow of o's
// budget: false when a worker of this process sweeps it already. A caller
// that gets true calls EndSweep when it is done.
func (s *Store) StartSweep(o Overflow) bool {
	h := &s.sweeps
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keys[o.Key] {
		return false
	}
	if h.keys == nil {
		h.keys, h.queues = map[string]bool{}, map[string]int{}
	}
	h.keys[o.Key] = true
	h.queues[o.Queue]++
	return true
}

// EndSweep records that the sweep StartSweep allowed is over.
func (s *Store) EndSweep(o Overflow) {
	h := &s.sweeps
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.keys, o.Key)
	if h.queues[o.Queue]--; h.queues[o.Queue] <= 0 {
		delete(h.queues, o.Queue)
	}
}

// Sweeping reports whether a worker of this process is sweeping an
// overflow in one of queues.
func (s *Store) Sweeping(queues []string) bool {
	h := &s.sweeps
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(queues, func(q string) bool { return h.queues[q] > 0 })
}
