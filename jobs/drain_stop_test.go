package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// A Drain whose context ends while the first job of a claim runs does not
// run the rest of the claim: they go back to ready with the attempt their
// claim counted given back and no error, are reported to no hook, and the
// next Drain of the same worker runs them.
func TestADrainStoppedMidClaimReleasesTheRestForTheNextDrain(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		runs := 0
		require.NoError(t, jobs.Register(h.reg, func(jctx context.Context, _ *jobs.Job[ctxJob]) error {
			runs++
			if runs == 1 {
				cancel()
				return nil
			}
			return jctx.Err()
		}, jobs.MaxAttempts(3)))
		ids := make([]int64, 3)
		for i := range ids {
			ids[i] = h.enqueue(ctxJob{N: i})
		}
		var log finishLog
		w := h.worker(jobs.WorkerConfig{Queues: []string{"default"}, Concurrency: 3, Hooks: log.hooks()})
		res, err := w.Drain(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, 1, runs, "one run: the job running when the context ended")
		require.Equal(t, jobs.DrainResult{Completed: 1}, res)
		require.Len(t, log.get(), 1, "the jobs not run are reported to no hook")
		var released []int64
		for _, id := range ids {
			j := h.job(id)
			if j.State == engine.StateCompleted {
				continue
			}
			released = append(released, id)
			require.Equal(t, engine.StateReady, j.State, "job %d", id)
			require.Zero(t, j.Attempt, "job %d: its claim's attempt given back", id)
			require.Empty(t, j.LastError, "job %d", id)
		}
		require.Len(t, released, 2)

		res, err = w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, jobs.DrainResult{Completed: 2}, res, "the next Drain runs them")
		for _, id := range released {
			j := h.job(id)
			require.Equal(t, engine.StateCompleted, j.State, "job %d", id)
			require.Equal(t, 1, j.Attempt, "job %d: one attempt, the one that ran", id)
		}
	})
}

// A Drain whose context ends as the database goes away, with jobs of its
// claim not run yet, returns once its result was tried as a stopping
// worker's (ten times), with an error that says what it left to the
// reaper: the result it could not write, and the jobs it could not
// release, which stay running for its process and are not run.
func TestADrainStoppedDuringAnOutageSaysWhatItLeftToTheReaper(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		t.Parallel() // each backend waits out the ten tries in real time
		db := &outageDB{DB: h.store.DB()}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		runs := 0
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[ctxJob]) error {
			runs++
			db.down.Store(true)
			cancel()
			return nil
		}))
		ids := []int64{h.enqueue(ctxJob{N: 1}), h.enqueue(ctxJob{N: 2})}
		w, err := jobs.NewWorker(testdb.Public(engine.New(h.store.Dialect(), db)), h.reg,
			jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Queues: []string{"default"}, Concurrency: 2})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { _, err := w.Drain(ctx); done <- err }()
		select {
		case err = <-done:
		case <-time.After(60 * time.Second):
			db.down.Store(false)
			<-done
			t.Fatal("Drain did not return within 60s of its context ending while the database was away")
		}
		db.down.Store(false)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "results not written before it stopped: 1 ")
		require.ErrorContains(t, err, "the jobs of its claim not run were not released")
		require.Equal(t, 1, runs)
		for _, id := range ids {
			require.Equal(t, engine.StateRunning, h.job(id).State, "job %d is left to the reaper", id)
		}
	})
}
