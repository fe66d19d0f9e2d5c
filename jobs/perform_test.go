package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
)

type performSlow struct{ N int }

func (performSlow) Kind() string { return "perform_slow" }

// Perform applies the kind's Timeout as a worker does: the handler's
// context ends with ErrJobTimeout as its cause, and the error it returns
// then wraps ErrJobTimeout. (It ran without one: a test of a handler's
// timeout path through Perform waited for ever.) A handler that returns in
// time is not touched.
func TestPerformAppliesTheKindsTimeout(t *testing.T) {
	reg := jobs.NewRegistry()
	var cause error
	require.NoError(t, jobs.Register(reg, func(ctx context.Context, j *jobs.Job[performSlow]) error {
		if j.Args.N == 0 {
			return nil
		}
		<-ctx.Done() // a call that honours its context
		cause = context.Cause(ctx)
		return ctx.Err()
	}, jobs.Timeout(20*time.Millisecond)))

	require.NoError(t, jobs.Perform(context.Background(), reg, performSlow{N: 0}))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := jobs.Perform(ctx, reg, performSlow{N: 1})
	require.ErrorIs(t, err, jobs.ErrJobTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "after 20ms")
	require.True(t, errors.Is(cause, jobs.ErrJobTimeout), "the handler's context ends with ErrJobTimeout as its cause, got %v", cause)
	require.NoError(t, ctx.Err(), "the kind's timeout ended the run, not the test's context")
}
