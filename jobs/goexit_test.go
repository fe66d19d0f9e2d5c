package jobs_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// guarantees.md, "Delivery": every claimed job ends its attempt. A handler
// that called runtime.Goexit (a test's t.FailNow) ended its goroutine with
// no result: the job stayed running until the process was presumed dead,
// and its slot in the worker was never freed, so a worker of one slot
// claimed nothing more.
func TestAHandlerThatCallsGoexitFailsItsAttemptAndFreesItsSlot(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		done := make(chan int, 2)
		require.NoError(t, jobs.Register(h.reg, func(_ context.Context, j *jobs.Job[waitJob]) error {
			if j.Args.N == 1 {
				runtime.Goexit()
			}
			done <- j.Args.N
			return nil
		}, jobs.MaxAttempts(1)))
		a := h.enqueue(waitJob{N: 1})
		b := h.enqueue(waitJob{N: 2})
		w := h.worker(jobs.WorkerConfig{Concurrency: 1, PollInterval: time.Hour})
		stop := h.run(w)
		require.Equal(t, []int{2}, receive(t, done, 1), "the slot was freed")
		stop()
		j := h.job(a)
		require.Equal(t, engine.StateFailed, j.State)
		require.Contains(t, j.LastError, "runtime.Goexit")
		require.Equal(t, engine.StateCompleted, h.job(b).State)
	})
}
