package jobs

import (
	"context"
	"fmt"

	"github.com/sluicequeue/sluice/internal/engine"
)

// DrainResult counts what a Drain did.
type DrainResult struct {
	// Completed, Retried, Failed, Cancelled and Snoozed count the runs
	// that ended so: completed, failed and to be retried, failed for
	// good, cancelled, snoozed.
	Completed, Retried, Failed, Cancelled, Snoozed int
	// Throttled counts runs an upstream refused (RetryAfter).
	Throttled int
	// Deferred counts deferrals by rate limits (a job may wait more than
	// once).
	Deferred int
}

// Ran is how many runs ended, whatever their outcome.
func (r DrainResult) Ran() int {
	return r.Completed + r.Retried + r.Failed + r.Cancelled + r.Snoozed + r.Throttled
}

// Drain works the worker's queues inline until no job is ready, then
// returns. Before each claim it promotes due scheduled jobs and hands
// slots to parked ones, on the worker's clock, which it never advances:
// with a fake clock, a test decides when retries and rate-limited jobs come
// due. Jobs run one at a time in the calling goroutine, with the same
// claims, limits and outcomes as Run. It is meant for tests and scripts.
func (w *Worker) Drain(ctx context.Context) (DrainResult, error) {
	var out DrainResult
	if err := w.store.CheckSchema(ctx); err != nil {
		return out, fmt.Errorf("jobs: drain: %w", err)
	}
	if err := w.register(ctx); err != nil {
		return out, err
	}
	defer func() { _ = w.store.DeregisterProcess(context.WithoutCancel(ctx), w.pid.Load()) }()
	for ctx.Err() == nil {
		now := w.storeClock()
		if w.limits != nil {
			// First the overrides: a changed limit reaches its parked
			// budgets before they are unparked.
			if err := w.limits.refresh(ctx, w.store, now, w.cfg.Horizon); err != nil {
				return out, fmt.Errorf("jobs: drain: %w", err)
			}
			for {
				n, err := w.store.Unpark(ctx, now, w.cfg.Horizon, 1000, engine.DefaultUnparkBatch)
				if err != nil {
					return out, fmt.Errorf("jobs: drain: %w", err)
				}
				if n < engine.DefaultUnparkBatch {
					break
				}
			}
		}
		// After Unpark: the slots it hands parked jobs may be due already.
		for {
			n, _, err := w.store.Promote(ctx, now, 1000)
			if err != nil {
				return out, fmt.Errorf("jobs: drain: %w", err)
			}
			if n < 1000 {
				break
			}
		}
		pid := w.pid.Load()
		w.leftovers = w.limits == nil // what a removed limit left runs too
		res, err := w.claim(ctx, pid, w.cfg.Concurrency, 0, nil, false)
		if err != nil {
			return out, fmt.Errorf("jobs: drain: %w", err)
		}
		out.Deferred += len(res.Deferred)
		if len(res.Jobs) == 0 {
			if len(res.Deferred) > 0 {
				continue // every candidate waited; there may be more behind them
			}
			return out, nil
		}
		batch := make([]result, 0, len(res.Jobs))
		for _, j := range res.Jobs {
			r := w.execute(ctx, j, &runState{base: w.log, job: j})
			r.pid = pid
			batch = append(batch, r)
			switch outcomeOf(r) {
			case OutcomeCompleted:
				out.Completed++
			case OutcomeRetried:
				out.Retried++
			case OutcomeFailed:
				out.Failed++
			case OutcomeCancelled:
				out.Cancelled++
			case OutcomeSnoozed:
				out.Snoozed++
			case OutcomeThrottled:
				out.Throttled++
			}
		}
		w.flush(batch)
	}
	return out, ctx.Err()
}
