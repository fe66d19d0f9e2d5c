package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// A worker whose Run returned may be Run again: it registers a new
// process, and works and records jobs as the first Run did; and it may be
// drained afterwards, and Run again after that. The second Run used to
// panic (close of closed channel), as its results channel was made once.
func TestAWorkerRunAgainWorksAndRecordsJobsAsANewProcess(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		done := make(chan int, 4)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[ctxJob]) error {
			done <- j.Args.N
			return nil
		}))
		w := h.worker(jobs.WorkerConfig{Queues: []string{"default"}, PollInterval: time.Hour})
		var pids []int64
		for run := 1; run <= 2; run++ {
			id := h.enqueue(ctxJob{N: run})
			stop := h.run(w)
			require.Equal(t, []int{run}, receive(t, done, 1), "Run %d works its job", run)
			stop()
			require.Equal(t, engine.StateCompleted, h.job(id).State, "Run %d wrote its job's result before it returned", run)
			pids = append(pids, w.ProcessID())
		}
		require.NotEqual(t, pids[0], pids[1], "the second Run is a new process")

		id := h.enqueue(ctxJob{N: 3})
		res, err := w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, res.Completed)
		require.Equal(t, engine.StateCompleted, h.job(id).State)
		require.Equal(t, []int{3}, receive(t, done, 1))

		id = h.enqueue(ctxJob{N: 4})
		stop := h.run(w)
		require.Equal(t, []int{4}, receive(t, done, 1), "Run after a Drain works its job")
		stop()
		require.Equal(t, engine.StateCompleted, h.job(id).State)
	})
}

// A Run or Drain called while another of the same worker is in progress
// returns ErrWorkerRunning at once, and changes nothing: the one in
// progress keeps its process and goes on. Two at once used to overwrite
// each other's process id (and share one results channel, which the
// first to stop closed under the other's handlers).
func TestARunOrDrainOfAWorkerAlreadyRunningIsRefused(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		started := make(chan int, 2)
		release := make(chan struct{})
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[ctxJob]) error {
			started <- j.Args.N
			<-release
			return nil
		}))
		first := h.enqueue(ctxJob{N: 1})
		w := h.worker(jobs.WorkerConfig{Queues: []string{"default"}, PollInterval: time.Hour})
		stop := h.run(w)
		require.Equal(t, []int{1}, receive(t, started, 1))
		pid := w.ProcessID()

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		refused := make(chan error, 2)
		go func() {
			refused <- w.Run(ctx)
			_, err := w.Drain(ctx)
			refused <- err
		}()
		for _, what := range []string{"Run", "Drain"} {
			select {
			case err := <-refused:
				require.ErrorIs(t, err, jobs.ErrWorkerRunning, what)
			case <-time.After(30 * time.Second):
				t.Fatalf("a %s of a worker already running did not return at once", what)
			}
		}
		require.Equal(t, pid, w.ProcessID(), "the refused calls registered no process")

		close(release)
		second := h.enqueue(ctxJob{N: 2})
		require.Equal(t, []int{2}, receive(t, started, 1), "the Run in progress goes on")
		stop()
		require.Equal(t, engine.StateCompleted, h.job(first).State)
		require.Equal(t, engine.StateCompleted, h.job(second).State)
		require.Equal(t, pid, w.ProcessID())
	})
}

// A handler that calls Run or Drain of the worker draining it is refused
// too: a Drain is in progress.
func TestARunOrDrainDuringADrainIsRefused(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		var w *jobs.Worker
		var runErr, drainErr error
		var pids []int64
		require.NoError(t, jobs.Register(h.reg, func(ctx context.Context, _ *jobs.Job[ctxJob]) error {
			pids = append(pids, w.ProcessID())
			runErr = atOnce(ctx, w.Run)
			drainErr = atOnce(ctx, func(ctx context.Context) error { _, err := w.Drain(ctx); return err })
			pids = append(pids, w.ProcessID())
			return nil
		}))
		id := h.enqueue(ctxJob{})
		w = h.worker(jobs.WorkerConfig{Queues: []string{"default"}})
		res, err := w.Drain(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, res.Completed)
		require.Equal(t, engine.StateCompleted, h.job(id).State)
		require.ErrorIs(t, runErr, jobs.ErrWorkerRunning)
		require.ErrorIs(t, drainErr, jobs.ErrWorkerRunning)
		require.Len(t, pids, 2)
		require.Equal(t, pids[0], pids[1], "the refused calls registered no process")
	})
}

// atOnce is what f returns, or an error if it did not return within 30 s
// (its context then ends).
func atOnce(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("did not return at once")
	}
}

// A Run released at shutdown a handler that ignores its context, which
// still runs when the worker is Run again: the second Run claims the job
// anew and records it, and its shutdown neither waits for the first Run's
// handler nor releases and reports its run again.
func TestASecondRunLeavesAloneARunTheFirstReleased(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		unblock := make(chan struct{})
		defer func() {
			select {
			case <-unblock:
			default:
				close(unblock)
			}
		}()
		started := make(chan int, 2)
		calls := 0
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[waitJob]) error {
			calls++ // one run at a time: the second starts once the first was released
			n := calls
			started <- n
			if n == 1 {
				<-unblock // ignores its context
			}
			return nil
		}))
		id := h.enqueue(waitJob{N: 1})
		var log finishLog
		w := h.worker(jobs.WorkerConfig{Concurrency: 2, PollInterval: time.Hour, JobTimeout: -1, Hooks: log.hooks()})
		stop := h.run(w)
		require.Equal(t, []int{1}, receive(t, started, 1))
		stopPastItsTimeout(h, stop)
		require.Equal(t, engine.StateReady, h.job(id).State, "released at shutdown")

		stop = h.run(w)
		require.Equal(t, []int{2}, receive(t, started, 1), "claimed anew by the second Run")
		stop() // the clock stays put: a shutdown waiting for the first run's handler would not return
		require.Equal(t, engine.StateCompleted, h.job(id).State)
		require.Equal(t, map[int64][]jobs.Outcome{id: {jobs.OutcomeReleased, jobs.OutcomeCompleted}}, log.outcomesByJob(),
			"the first Run's run is reported once, as released")
	})
}
