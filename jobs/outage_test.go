package jobs_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md, "Nothing lost": "Errors on the connection
// are retried until the results land"; a worker whose database goes away
// for a while keeps the results of the jobs that finished meanwhile, writes
// them when it comes back, and claims again.
func TestResultsOfAnOutageLandWhenTheDatabaseComesBack(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan int, 3)
		finish := map[int]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[waitJob]) error {
			started <- j.Args.N
			if ch := finish[j.Args.N]; ch != nil {
				<-ch
			}
			return nil
		}))
		a, b := h.enqueue(waitJob{N: 1}), h.enqueue(waitJob{N: 2})
		db := &outageDB{DB: h.store.DB()}
		w, err := jobs.NewWorker(testdb.Public(engine.New(h.store.Dialect(), db)), h.reg,
			jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Concurrency: 2, PollInterval: time.Hour, JobTimeout: -1})
		require.NoError(t, err)
		stop := h.run(w)
		require.ElementsMatch(t, []int{1, 2}, receive(t, started, 2))

		// The database goes away; both jobs finish meanwhile, and the claim
		// their freed slots make fails.
		db.down.Store(true)
		close(finish[1])
		close(finish[2])
		<-h.clock.WaitForTimerAt(t0.Add(5 * time.Second)) // the failed claim's back-off
		require.True(t, db.refused.Load() > 0)
		for _, id := range []int64{a, b} {
			require.Equal(t, engine.StateRunning, h.job(id).State)
		}
		c := h.enqueue(waitJob{N: 3})

		// It comes back: the results land, and the next claim takes the new job.
		db.down.Store(false)
		h.clock.Advance(5 * time.Second)
		require.Equal(t, []int{3}, receive(t, started, 1))
		require.Eventually(t, func() bool {
			for _, id := range []int64{a, b, c} {
				if h.job(id).State != engine.StateCompleted {
					return false
				}
			}
			return true
		}, 30*time.Second, 5*time.Millisecond)
		stop()
		for _, id := range []int64{a, b, c} {
			require.Equal(t, 1, h.job(id).Attempt)
		}
	})
}

// outageDB refuses every statement while down is set, as a database that
// went away does.
type outageDB struct {
	engine.DB
	down    atomic.Bool
	refused atomic.Int32
}

var errOutage = errors.New("dial tcp 10.0.0.7:5432: connect: connection refused")

func (d *outageDB) check() error {
	if d.down.Load() {
		d.refused.Add(1)
		return errOutage
	}
	return nil
}

func (d *outageDB) Exec(ctx context.Context, q string, args ...any) (engine.Result, error) {
	if err := d.check(); err != nil {
		return engine.Result{}, err
	}
	return d.DB.Exec(ctx, q, args...)
}

func (d *outageDB) Query(ctx context.Context, q string, args ...any) (engine.Rows, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	return d.DB.Query(ctx, q, args...)
}

func (d *outageDB) Begin(ctx context.Context) (engine.Tx, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	return d.DB.Begin(ctx)
}
