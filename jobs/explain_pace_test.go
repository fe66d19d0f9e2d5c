package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// docs/rate-limits.md: a ready job's estimated start is "the jobs ahead
// at the pace the queue completed or failed jobs in the last minute".
// An operator who cancels a backlog of 60 jobs, none of which ran, does
// not make the queue look as if it ran a job a second: explain of a ready
// job behind others knows no pace (it estimated a start one second per
// job ahead, from the cancellations). Once jobs complete, the pace is
// theirs alone.
func TestExplainsPaceOfAReadyJobLeavesCancelledJobsOut(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[noop]) error { return nil }))
		var backlog []int64
		for i := range 60 {
			backlog = append(backlog, h.enqueue(noop{N: i}))
		}
		moved, err := h.store.CancelJobs(ctx, engine.At(t0), backlog, "backlog dropped")
		require.NoError(t, err)
		require.Len(t, moved, 60)

		h.enqueue(noop{N: 100})
		last := h.enqueue(noop{N: 101})
		e := h.explain(last)
		require.Equal(t, jobs.ReasonReady, e.Reason)
		require.EqualValues(t, 1, e.Ahead.N)
		require.True(t, e.EstimatedStart.IsZero(),
			"60 cancelled jobs that never ran are no pace: explain estimated %s (%s)", e.EstimatedStart, e.EstimateBasis)
		require.Contains(t, e.EstimateBasis, "pace is not known")

		// Two completions in the minute: one job ahead takes 30 s.
		h.drain(jobs.WorkerConfig{})
		h.enqueue(noop{N: 102})
		last = h.enqueue(noop{N: 103})
		e = h.explain(last)
		require.Equal(t, t0.Add(30*time.Second), e.EstimatedStart, e.EstimateBasis)
		require.Contains(t, e.EstimateBasis, "(2 completed or failed)")
	})
}
