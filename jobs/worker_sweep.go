package jobs

import (
	"context"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// sweepAfter is how many jobs a worker's claims defer on a budget, while
// more are ready behind them, before it sweeps the rest; a claim that parks
// sweeps at once.
const sweepAfter = 128

// overflowing returns the overflows of a claim that the worker should
// sweep: those it parked jobs on (the budget's slots reach past the
// horizon: a flood), and those its claims have by now deferred sweepAfter
// jobs on. A backlog of a few hundred jobs is thus deferred by the claims
// of every worker process that meets it, each waking for the slots it
// handed out, so that one late worker delays only its own slots; a sweep
// hands all its slots to one worker, and the drain would then wait on that
// one worker's claims.
func (w *Worker) overflowing(res *engine.ClaimResult) []engine.Overflow {
	if len(res.Overflows) == 0 {
		return nil
	}
	if w.overflowed == nil {
		w.overflowed = map[string]int{}
	}
	// The budgets that overflowed, and whether the claim parked on them.
	parked := make(map[string]bool, len(res.Overflows))
	for _, o := range res.Overflows {
		parked[o.Key] = false
	}
	for _, d := range res.Deferred {
		if p, over := parked[d.Key]; over {
			w.overflowed[d.Key]++
			parked[d.Key] = p || d.Parked
		}
	}
	var out []engine.Overflow
	for _, o := range res.Overflows {
		if parked[o.Key] || w.overflowed[o.Key] >= sweepAfter {
			out = append(out, o)
		}
	}
	for _, o := range out {
		delete(w.overflowed, o.Key)
	}
	if len(w.overflowed) > maxOverflowed {
		clear(w.overflowed) // many budgets that each overflowed a little
	}
	return out
}

// maxOverflowed bounds the budgets a worker counts overflows on: the
// counts run over the worker's life, and per-account keys are many.
const maxOverflowed = 10_000

// sweepBatch is how many overflowing jobs one transaction defers, once a
// sweep is under way: its first batch is firstSweepBatch, and each after
// that twice the one before. sweepRest is how many times a batch's duration
// the sweep rests after it. Small batches keep the claims around a sweep
// quick: on PostgreSQL a 500-row batch took about 6 ms, and the unlimited
// jobs claimed meanwhile waited that much longer (light-load p99 1.5–2.0×
// the p99 without a flood, against 1.0–1.4× with 100-row batches); the
// sweep takes about 1.6 times as long.
const (
	sweepBatch      = 100
	firstSweepBatch = 50
	sweepRest       = 19
)

// sweep defers, in a goroutine per budget, the ready jobs behind an
// overflow a claim found, so that a flood on a tight budget leaves the
// ready queue in a few set-based statements instead of passing through
// claim after claim.
func (w *Worker) sweep(ctx context.Context, overflows []engine.Overflow) {
	for _, o := range overflows {
		if !w.store.StartSweep(o) {
			continue
		}
		w.sweeps.Add(1)
		go func() {
			defer w.sweeps.Done()
			defer w.store.EndSweep(o)
			switch span, ok, err := w.store.OverflowSpan(ctx, o); {
			case err != nil:
				// The claims leave all the queue's limited jobs to it.
				w.log.Warn("sluice: read the span of the jobs behind a full budget", "budget", o.Key, "err", err)
			case ok:
				w.store.SetSweepSpan(o, span)
			default:
				return // none ready, or the queue is paused: nothing to sweep
			}
			total := 0
			// The first batches are small: a sweep that starts while the
			// claims still meet the flood loses little when one of them
			// moves the budget's cursor under it, and the claims around it
			// are not held up by one large statement at once.
			for batch := firstSweepBatch; ctx.Err() == nil; batch = min(2*batch, sweepBatch) {
				began := time.Now()
				ids, slots, err := w.store.DeferOverflow(ctx, w.storeClock(), o, w.cfg.Horizon, batch)
				w.slots.addAll(slots)
				n := len(ids)
				total += n
				if n > 0 && w.hooks.OnDefer != nil {
					w.hooks.OnDefer(sweepEvent(o, ids, n-len(slots)))
				}
				if err != nil {
					if ctx.Err() == nil {
						w.log.Warn("sluice: defer the jobs behind a full budget", "budget", o.Key, "err", err)
					}
					break
				}
				if n < batch {
					break
				}
				// A twentieth of the time at most: the claims around it keep
				// their pace, and the flood's own jobs wait on their budget
				// anyway.
				select {
				case <-ctx.Done():
				case <-time.After(sweepRest * time.Since(began)):
				}
			}
			if total > 0 {
				w.log.Debug("sluice: deferred the jobs behind a full budget", "budget", o.Key, "kind", o.Kind, "count", total)
			}
		}()
	}
}
