package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

// observability.md, "Around each run": middleware wraps every attempt,
// those that fail before a handler could run included. A job of a kind
// this worker has no handler for spends an attempt and is retried, but
// the worker once failed it before the middleware chain, so no
// middleware (no span, no latency) saw the attempt. The worker's
// middleware now sees it, with next returning ErrUnknownKind.
func TestMiddlewareWrapsAnAttemptWhoseKindHasNoHandler(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Declare[email](h.reg))
		id := h.enqueue(email{To: "a@example.com"})
		var seen []error
		mw := func(ctx context.Context, job jobs.JobInfo, next func(context.Context) error) error {
			require.Equal(t, id, job.ID)
			err := next(ctx)
			seen = append(seen, err)
			return err
		}
		h.drain(jobs.WorkerConfig{Middleware: []jobs.Middleware{mw}})
		require.Len(t, seen, 1, "the middleware wrapped the attempt")
		require.ErrorIs(t, seen[0], jobs.ErrUnknownKind)
		j := h.job(id)
		require.Equal(t, engine.StateScheduled, j.State, "the attempt failed and is retried")
		require.Equal(t, 1, j.Attempt)
	})
}
