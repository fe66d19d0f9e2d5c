package engine

import (
	"context"
	"fmt"
	"math"
	"sync"
)

// sweepHub records the budgets whose overflow a goroutine of this process
// is deferring (DeferOverflow), the queues they are in, and the span of
// each flood, so that the workers sharing a store sweep each budget once
// and leave a flood to its sweep meanwhile: two sweeps of one budget would
// only race for its slot cursor, each losing a batch's work in turn, and a
// claim that met the flood would do the same.
type sweepHub struct {
	mu     sync.Mutex
	sweeps map[string]*sweep // by budget key
}

// sweep is one budget's sweep: its queue, and the span of the ready jobs
// it moves once known.
type sweep struct {
	queue string
	span  *Span
}

// StartSweep reports whether the caller is to sweep the overflow of o's
// budget: false when a worker of this process sweeps it already. A caller
// that gets true calls EndSweep when it is done. Until it records the
// flood's span (SetSweepSpan), the workers leave all the queue's
// rate-limited jobs to it.
func (s *Store) StartSweep(o Overflow) bool {
	h := &s.sweeps
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sweeps[o.Key] != nil {
		return false
	}
	if h.sweeps == nil {
		h.sweeps = map[string]*sweep{}
	}
	h.sweeps[o.Key] = &sweep{queue: o.Queue}
	return true
}

// SetSweepSpan records the span of the flood a sweep that StartSweep allowed
// is moving: the workers then take the queue's rate-limited jobs more
// urgent than it or queued after it.
func (s *Store) SetSweepSpan(o Overflow, sp Span) {
	h := &s.sweeps
	h.mu.Lock()
	defer h.mu.Unlock()
	if sw := h.sweeps[o.Key]; sw != nil {
		sw.span = &sp
	}
}

// EndSweep records that the sweep StartSweep allowed is over.
func (s *Store) EndSweep(o Overflow) {
	h := &s.sweeps
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.sweeps, o.Key)
}

// Swept returns, for those of queues in which a worker of this process is
// sweeping a flood, what a claim leaves to the sweep (ClaimParams.Swept):
// the flood's span, or nil — all the queue's rate-limited jobs — while its
// span is not known or two floods of the queue are swept at once. It
// returns nil when no sweep runs in them.
func (s *Store) Swept(queues []string) map[string]*Span {
	h := &s.sweeps
	h.mu.Lock()
	defer h.mu.Unlock()
	var out map[string]*Span
	for _, sw := range h.sweeps {
		for _, q := range queues {
			if q != sw.queue {
				continue
			}
			if out == nil {
				out = map[string]*Span{}
			}
			if _, two := out[q]; two {
				out[q] = nil
			} else {
				out[q] = sw.span
			}
		}
	}
	return out
}

// OverflowSpan returns the span of the ready jobs that wait on o's budget
// like the one a claim deferred (DeferOverflow's jobs, at any priority),
// or false when none is ready or their queue is paused: there is nothing
// to sweep.
func (s *Store) OverflowSpan(ctx context.Context, o Overflow) (Span, bool, error) {
	var ends [2]Place
	for i, read := range []func(queue, kind, rateKeys string) (string, []any){s.q.FirstReadyLike, s.q.LastReadyLike} {
		q, args := read(o.Queue, o.Kind, o.RateKeys)
		ids, prios, err := queryIDPriorities(ctx, s.db, q, args)
		if err != nil {
			return Span{}, false, s.wrap(fmt.Errorf("read the span of the overflow of %s: %w", o.Key, err))
		}
		if len(ids) == 0 {
			return Span{}, false, nil
		}
		ends[i] = Place{Priority: prios[0], ID: ids[0]}
	}
	return Span{First: ends[0], Last: ends[1], Kind: o.Kind, RateKeys: o.RateKeys}, true, nil
}

// aroundSpan returns the statements that lock up to n of a queue's ready
// rate-limited jobs more urgent than a span and up to n after it, each
// stream an index range in claim order, and the three of them in that
// order between them: more urgent than its first job, of its last job's
// priority after it, and less urgent than that. The jobs queued before
// the span at its first job's priority are left to the sweep with it: on
// PostgreSQL that range holds the index entries of the jobs the sweep has
// already moved, which every claim would walk again (3 ms a claim, 50,000
// jobs into a flood) until a vacuum removed them.
func (s *Store) aroundSpan(queue string, sp Span, n int) []Stmt {
	return []Stmt{
		query(s.q.LockReadyLimitedBefore(queue, sp.First.Priority, n)),
		query(s.q.LockReadyLimitedAt(queue, sp.Last.Priority, sp.Last.ID, math.MaxInt64, n)),
		query(s.q.LockReadyLimitedAfter(queue, sp.Last.Priority, n)),
	}
}
