package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// observability.md, "Around each run": middleware wraps every attempt,
// those that fail before a handler could run included. A job of a kind
// this worker has no handler for is given back (see rolling_deploy_test.go),
// but the worker once decided so before the middleware chain, so no
// middleware (no span, no latency) saw the run. The worker's middleware
// now sees it, with next returning ErrUnknownKind, and Classify says
// what the worker makes of it: snoozed, for the wait it is given back for.
func TestMiddlewareWrapsAnAttemptWhoseKindHasNoHandler(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg))
		id := h.enqueue(email{To: "a@example.com"})
		var seen []error
		var verdicts []jobs.Verdict
		mw := func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
			require.Equal(t, id, job.ID)
			err := next(ctx)
			seen = append(seen, err)
			verdicts = append(verdicts, jobs.Classify(ctx, job, err))
			return err
		}
		h.drain(jobs.WorkerConfig{Middleware: []jobs.Middleware{mw}})
		require.Len(t, seen, 1, "the middleware wrapped the attempt")
		require.ErrorIs(t, seen[0], jobs.ErrUnknownKind)
		require.Equal(t, jobs.OutcomeSnoozed, verdicts[0].Outcome)
		require.InDelta(t, 2*time.Second, verdicts[0].Wait, float64(200*time.Millisecond), "the first give-back waits 2 s ±10%%")
		require.Contains(t, verdicts[0].Reason, `no handler for kind "email"`)
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State, "given back to wait")
		require.Equal(t, 0, j.Attempt, "its attempt unspent")
	})
}
