package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

// a cost above the declared burst makes the enqueue read the
// overrides (client.go enqueue: limitsView.load(ctx, c.store)) through the
// store's pool, not through the executor it enqueues with. In a caller's
// transaction on SQLite that transaction holds the store's one connection:
// EnqueueTx waits for itself until its context ends — with an override
// that admits the cost, and without one (where it must refuse at once).
func TestEnqueueTxOfACostAboveTheDeclaredBurstDoesNotWaitForItself(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[mlJob]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[mlJob]{To: 10, Per: time.Second, Burst: 2, Key: "global", Cost: mlItems})))
		require.NoError(t, h.store.SetOverride(context.Background(), engine.Override{Target: "ml", To: 10, Per: time.Second, Burst: 5}, h.clock.Now()))

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tx, commit, rollback := callerTx(t, h.store)
		start := time.Now()
		_, err := h.client.EnqueueTx(ctx, tx, mlJob{Items: 4})
		took := time.Since(start)
		if err != nil {
			rollback()
		}
		require.NoError(t, ctx.Err(), "EnqueueTx waited %s for its context to end: %v", took, err)
		require.NoError(t, err, "the override in force (burst 5) admits a cost of 4")
		commit()
	})
}
