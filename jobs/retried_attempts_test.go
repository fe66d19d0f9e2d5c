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

// dashboard.md: every failed attempt is "kept with the job in
// sluice_attempts ... deleted with it". An operator's retry (sluice retry)
// sets a failed job's attempt back to 0 and keeps its failed runs; with
// DeleteOnComplete, the retried job that then completed at attempt 1 was
// deleted without them, as the worker asked for its kept attempts to be
// deleted only for a completion past attempt 1: they stayed in
// sluice_attempts, orphaned, and nothing ever deleted them.
func TestAnOperatorsRetryThenDeleteOnCompleteLeavesNoAttempts(t *testing.T) {
	for _, from := range []engine.State{engine.StateFailed, engine.StateCancelled} {
		t.Run(string(from), func(t *testing.T) {
			each(t, func(t *testing.T, h *harness) {
				ctx := context.Background()
				h.store.DeleteOnComplete = true
				fail := true
				require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[waitJob]) error {
					if fail {
						return errors.New("upstream 503")
					}
					return nil
				}, jobs.MaxAttempts(2), jobs.Backoff(func(int) time.Duration { return time.Second })))
				id := h.enqueue(waitJob{})
				require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Retried)
				h.clock.Advance(time.Second)
				_, _, err := h.store.Promote(ctx, engine.HostTime(h.clock.Now), 100)
				require.NoError(t, err)
				require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Failed)
				if from == engine.StateCancelled {
					_, err := h.store.CancelJobs(ctx, engine.HostTime(h.clock.Now), []int64{id}, "")
					require.NoError(t, err)
				}
				require.Equal(t, from, h.job(id).State)
				kept, err := h.store.Attempts(ctx, id)
				require.NoError(t, err)
				require.Len(t, kept, 2)

				// sluice retry, then a run that completes at attempt 1.
				retried, err := h.store.RetryJobs(ctx, engine.HostTime(h.clock.Now), []int64{id})
				require.NoError(t, err)
				require.Equal(t, []engine.Moved{{ID: id, State: engine.StateReady}}, retried)
				require.Equal(t, 0, h.job(id).Attempt)
				fail = false
				require.Equal(t, 1, h.drain(jobs.WorkerConfig{}).Completed)

				_, err = h.store.GetJob(ctx, id)
				require.ErrorIs(t, err, engine.ErrNotFound, "deleted on completion")
				left, err := h.store.Attempts(ctx, id)
				require.NoError(t, err)
				require.Empty(t, left, "its kept attempts are deleted with it")
			})
		})
	}
}
