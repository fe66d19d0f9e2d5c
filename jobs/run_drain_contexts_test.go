package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/concurrency"
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
			require.ErrorIs(t, err, context.Canceled)
			require.ErrorContains(t, err, "results not written before it stopped: 1 ", "the error says the job's result was left to the reaper")
		case <-time.After(60 * time.Second):
			t.Fatalf("Drain did not return within 60s of its context ending while the database was away (%d statements refused)", db.refused.Load())
		}
	})
}

// guarantees.md, "Delivery": a reap "waits for no lock another
// transaction holds", and a promotion "waits for no such lock either";
// concurrency.md: a transaction of yours that enqueued a job of a key with
// EnqueueTx and is still open holds that key's semaphore. The results a
// worker writes are batched across all its jobs, whatever their queue or
// kind; a batch that gives a slot of that key back waits for the app's
// transaction, and with it every other result of the worker: a job of
// another kind, with no limit at all, that finished meanwhile stays
// running in the database (run again if the worker dies then) for as long
// as the app keeps its transaction open.
func TestAnAppTransactionHoldingAKeyDoesNotHoldUpOtherJobsResults(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		if h.store.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction of the app's stops every write")
		}
		ctx := context.Background()
		release := make(chan struct{})
		var once bool
		defer func() {
			if !once {
				close(release)
			}
		}()
		started := make(chan string, 4)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[accountJob]) error {
			started <- "account"
			<-release
			return nil
		}, jobs.ConcurrencyLimit(concurrency.Limit[accountJob]{Key: func(a accountJob) any { return a.Account }, To: 2})))
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[ctxJob]) error {
			started <- "plain"
			return nil
		}))
		h.enqueue(accountJob{Account: 1})
		w := h.worker(jobs.WorkerConfig{Concurrency: 4, PollInterval: time.Hour})
		stop := h.run(w)
		defer stop()
		require.Equal(t, []string{"account"}, receive(t, started, 1))

		// The app enqueues another job of account 1 in its transaction,
		// still open: it holds the key's semaphore.
		tx, commit, rollback := callerTx(t, h.store)
		ended := false
		defer func() {
			if !ended {
				rollback()
			}
		}()
		_, err := h.client.EnqueueTx(ctx, tx, accountJob{Account: 1, N: 2})
		require.NoError(t, err)

		// Account 1's running job ends (its result gives the slot back),
		// then an unrelated job of another kind runs and ends.
		once = true
		close(release)
		plain := h.enqueue(ctxJob{})
		require.Equal(t, []string{"plain"}, receive(t, started, 1))
		landed := false
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if h.job(plain).State == engine.StateCompleted {
				landed = true
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		state := h.job(plain).State
		commit()
		ended = true
		require.True(t, landed, "an unlimited job's result waits for an app's open transaction on another kind's key: the job is %s 10 s after it ended", state)
	})
}
