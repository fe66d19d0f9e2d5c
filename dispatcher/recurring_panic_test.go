package dispatcher_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// A recurring task's enqueue runs the app's code in the dispatcher: the
// client's enqueue middleware, a kind's Cost and fairness functions. One
// that panicked took the dispatcher down in the middle of the tick's
// transaction, and every dispatcher after it at the same tick. The tick
// fails instead, its transaction rolled back, with the panic and its
// stack, and is tried again on the next round.
func TestARecurringTaskWhoseEnqueuePanicsFailsItsTick(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		var broken atomic.Bool
		broken.Store(true)
		mw := func(ctx context.Context, js []*jobs.EnqueueJob, next func(context.Context) error) error {
			if broken.Load() {
				panic("the tracer is not set up")
			}
			return next(ctx)
		}
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c, Middleware: []jobs.EnqueueMiddleware{mw}})
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "hourly", Schedule: "@hourly", Args: report{Period: "1h"}}}})
		c.Advance(time.Hour)
		// Unguarded, the panic crashes the test binary: recovered here, it
		// would leave the tick's transaction open, and the test's clean-up
		// waiting on it.
		_, err := d.Tick(ctx)
		require.ErrorContains(t, err, "enqueue panicked: the tracer is not set up")
		require.ErrorContains(t, err, "recurring_panic_test.go", "with its stack")
		require.Empty(t, reports(t, s))
		last, err := s.LastTicks(ctx)
		require.NoError(t, err)
		require.NotContains(t, last, "hourly", "the tick's record is rolled back")

		broken.Store(false)
		c.Advance(time.Second)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Len(t, reports(t, s), 1, "the same tick is tried again, and enqueues")
	})
}

// The client's OnEnqueue hook runs once the tick's transaction committed:
// one that panics is logged, and the tick stands, with its job, reported
// once and not enqueued again.
func TestARecurringTaskWhoseOnEnqueuePanicsKeepsItsJob(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		var hooked atomic.Int32
		client := jobs.NewClient(testdb.Public(s), registry(t), jobs.ClientConfig{Clock: c, OnEnqueue: func(jobs.EnqueueEvent) {
			hooked.Add(1)
			panic("the metrics are not set up")
		}})
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Client: client,
			Tasks: []dispatcher.Task{{Key: "hourly", Schedule: "@hourly", Args: report{Period: "1h"}}}})
		c.Advance(time.Hour)
		_, err := d.Tick(ctx)
		require.NoError(t, err, "the job is enqueued: the tick ran")
		require.Len(t, reports(t, s), 1)
		c.Advance(time.Second)
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		require.Len(t, reports(t, s), 1, "the tick is not enqueued again")
		require.EqualValues(t, 1, hooked.Load())
	})
}
