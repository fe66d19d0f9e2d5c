package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
	"github.com/sluicequeue/sluice/jobs"
)

// runAgainUntilRegistered runs w.Run until the worker registered a process id
// other than before, then cancels it and returns what Run returned, or
// the panic it raised as an error.
func runAgainUntilRegistered(t *testing.T, w *jobs.Worker, before int64) (err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("Run panicked: %v", p)
			}
		}()
		done <- w.Run(ctx)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for w.ProcessID() == before && time.Now().Before(deadline) {
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// A worker whose Run returned (its context ended: a leader lost its
// lease, a service restarted its loop) may be Run again, or refuse to with
// an error; it must not panic, which would take the whole process down.
func TestRunningAWorkerAgainAfterItStoppedDoesNotPanic(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		w := h.worker(jobs.WorkerConfig{Queues: []string{"default"}, PollInterval: time.Second})
		require.NoError(t, runAgainUntilRegistered(t, w, 0), "first Run")
		first := w.ProcessID()
		require.NotZero(t, first)
		err := runAgainUntilRegistered(t, w, first)
		if err != nil {
			require.NotContains(t, err.Error(), "panicked", "a second Run of a stopped worker panics")
		}
	})
}

type ctxJob struct{ N int }

func (ctxJob) Kind() string { return "review_ctx_job" }

// Run's shutdown releases the jobs it has not finished, attempt given
// back; Drain promises "the same claims, limits and outcomes as Run". A
// Drain whose context ends part way through a claim must not go on to run
// the rest of that claim with a context already cancelled: each such run
// fails (a handler doing I/O returns ctx.Err()), spending an attempt (with
// MaxAttempts(1), failing the job for good) for a run that never had a
// chance.
func TestADrainCancelledMidClaimDoesNotRunTheRestOfItsClaimWithACancelledContext(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var ran []int
		require.NoError(t, jobs.Register(h.reg, func(jctx context.Context, j *jobs.Job[ctxJob]) error {
			ran = append(ran, j.Args.N)
			if len(ran) == 1 {
				cancel() // the script is interrupted while the first job runs
				return nil
			}
			return jctx.Err() // what a handler doing I/O returns
		}, jobs.MaxAttempts(1)))
		ids := make([]int64, 3)
		for i := range ids {
			ids[i] = h.enqueue(ctxJob{N: i})
		}
		w := h.worker(jobs.WorkerConfig{Queues: []string{"default"}, Concurrency: 3})
		_, err := w.Drain(ctx)
		require.ErrorIs(t, err, context.Canceled)
		for _, id := range ids[1:] {
			j := h.job(id)
			require.NotEqual(t, "failed", string(j.State),
				"job %d, claimed with the first but not started when the drain's context ended, failed for good (%q); handler runs: %v", id, j.LastError, ran)
		}
		require.Len(t, ran, 1, "the drain ran jobs after its context ended")
	})
}

// guarantees.md, "Nothing lost": "Once the worker is stopping (from the
// moment it stops claiming), a batch is tried ten times (about 40 s), and
// a batch that still fails is left to the reaper". A Drain whose context
// ended has stopped claiming; with the database away it must return
// (as a stopping worker gives up) instead of retrying its last result for
// as long as the process lives, ignoring its context: a script's deadline
// or a test's timeout then never ends it.
func TestADrainWhoseContextEndedDuringAnOutageReturns(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		t.Parallel() // each backend waits out the bound in real time
		db := &outageDB{DB: h.store.DB()}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[ctxJob]) error {
			db.down.Store(true) // the database goes away while the job runs
			cancel()            // and the script is interrupted
			return nil
		}))
		h.enqueue(ctxJob{})
		w, err := jobs.NewWorker(testdb.Public(engine.New(h.store.Dialect(), db)), h.reg,
			jobs.WorkerConfig{Clock: h.clock, Logger: quiet(), Queues: []string{"default"}})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { _, err := w.Drain(ctx); done <- err }()
		defer func() {
			db.down.Store(false) // let a stuck drain end
			<-done
		}()
		select {
		case err := <-done:
			done <- err
			require.Error(t, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("Drain did not return within 60s of its context ending while the database was away (%d statements refused)", db.refused.Load())
		}
	})
}
