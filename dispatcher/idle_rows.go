package dispatcher

import (
	"context"
	"errors"
	"time"

	"github.com/sluicequeue/sluice/internal/engine"
)

// clearIdleRows is the work of TaskClearIdleBudgets: it deletes the idle
// rows of rate-limit budgets, fairness keys, concurrency keys and coalesce
// keys, each in batches. Every step runs whatever the others did: one
// that fails (a table whose statement keeps failing) leaves the others'
// tables cleared, and the error joins the steps' errors. It returns how many rows
// the steps deleted.
func (d *Dispatcher) clearIdleRows(ctx context.Context) (int, error) {
	steps := []struct {
		what string
		run  func() (int, error)
	}{
		{"idle rate-limit budgets", func() (int, error) {
			return d.store.ClearIdleBudgets(ctx, d.storeClock(), 500, 300*time.Millisecond)
		}},
		{"idle fairness keys", func() (int, error) { return d.store.PruneFairKeys(ctx) }},
		{"idle concurrency keys", func() (int, error) {
			return d.store.ClearIdleSemaphores(ctx, d.storeClock(), engine.SemaphoreIdleAge, 500, 300*time.Millisecond)
		}},
		{"released coalesce keys", func() (int, error) { return d.store.ClearCoalesceKeys(ctx, 500, 300*time.Millisecond) }},
	}
	total := 0
	var errs []error
	for _, st := range steps {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		n, err := st.run()
		total += n
		if n > 0 {
			d.log.Info("sluice: cleared "+st.what, "count", n)
		}
		if err != nil {
			errs = append(errs, err) // the store's error names its step
		}
	}
	return total, errors.Join(errs...)
}
