package dispatcher_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md, "Nothing lost": "A transaction the database aborts with a
// deadlock or a serialization failure is run again ...: nothing a failed
// attempt decided ... carries into the next"; observability.md: "A
// deadlock or serialization failure in the write is retried inside next,
// in a new transaction: each middleware runs once per enqueue, never again
// for a retry, so its side effects (a span, a log line) happen once", and
// ClientConfig.OnEnqueue "runs after the commit" (metrics.OnEnqueue counts
// enqueued jobs with it).
//
// A recurring task's tick enqueues inside the tick's own transaction
// (engine.RunTick), which the store runs again whole after a deadlock: the
// client's enqueue middleware and OnEnqueue hook run once per attempt. A
// deadlock after the enqueue (here at the statement that records the
// tick's job) reports, to the hook and to metrics, a job that was rolled
// back, and the real one a second time.
func TestReviewConnLossARetriedTickReportsItsEnqueueOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		s, faults := testdb.WithFaults(base)
		faults.FailOnce = "UPDATE sluice_recurring_runs SET job_id" // SetTickJob, after the enqueue
		c := clock.NewFake(t0)
		var middleware, hooked atomic.Int32
		var hookedIDs []int64
		mw := func(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) error {
			middleware.Add(1)
			return next(ctx)
		}
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c,
			Middleware: []jobs.EnqueueMiddleware{mw},
			OnEnqueue: func(e jobs.EnqueueEvent) {
				hooked.Add(1)
				hookedIDs = append(hookedIDs, e.ID)
			}})
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "hourly", Schedule: "@hourly", Args: report{Period: "1h"}}}})
		c.Advance(time.Hour)
		_, err := d.Tick(ctx)
		require.NoError(t, err, "the deadlock is retried")
		require.Empty(t, faults.FailOnce, "the deadlock fired")
		require.Len(t, reports(t, base), 1, "one job enqueued")
		assert.Equal(t, int32(1), hooked.Load(), "OnEnqueue reported jobs %v for one enqueued job", hookedIDs)
		assert.Equal(t, int32(1), middleware.Load(), "enqueue middleware ran once per enqueue")
	})
}
