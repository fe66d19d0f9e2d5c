package dispatcher_test

import (
	"context"
	"errors"
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
		require.Equal(t, [2]int32{1, 1}, [2]int32{hooked.Load(), middleware.Load()},
			"OnEnqueue and the enqueue middleware run once for one enqueue (OnEnqueue reported jobs %v; the job is %d)", hookedIDs, reports(t, base)[0].ID)
	})
}

// A promotion by the dispatcher whose commit lands and whose reply is
// lost: the tick fails, the jobs are ready all the same, and the next tick
// promotes nothing twice. Holds.
func TestReviewConnLossALostPromotionReplyLosesNothing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, base *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		var lose atomic.Bool
		lose.Store(true)
		s := engine.New(base.Dialect(), &lostCommitDB{DB: base.DB(), lose: &lose})
		client := jobs.NewClient(testdb.Public(base), registry(t), jobs.ClientConfig{Clock: c})
		for i := 0; i < 3; i++ {
			_, err := client.Enqueue(ctx, report{Period: "1h"}, jobs.Delay(time.Minute))
			require.NoError(t, err)
		}
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet()})
		c.Advance(time.Minute)
		_, err := d.Tick(ctx)
		require.Error(t, err, "the reply was lost")
		require.False(t, lose.Load())
		for _, j := range reports(t, base) {
			require.Equal(t, engine.StateReady, j.State)
		}
		res, err := d.Tick(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Promoted)
	})
}

// lostCommitDB commits the first transaction after lose is set, and then
// reports a dropped connection.
type lostCommitDB struct {
	engine.DB
	lose *atomic.Bool
}

func (d *lostCommitDB) Begin(ctx context.Context) (engine.Tx, error) {
	tx, err := d.DB.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &lostCommitTx{Tx: tx, d: d}, nil
}

type lostCommitTx struct {
	engine.Tx
	d *lostCommitDB
}

func (t *lostCommitTx) Commit(ctx context.Context) error {
	if err := t.Tx.Commit(ctx); err != nil {
		return err
	}
	if t.d.lose.CompareAndSwap(true, false) {
		return errors.New("read tcp: connection reset by peer")
	}
	return nil
}
