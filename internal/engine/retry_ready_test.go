package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// guarantees.md, "A job's life": "A retry makes a job ready now with its
// attempts reset (a ready job keeps its place and gets its attempts
// reset)".
func TestAnOperatorsRetryOfAReadyJobKeepsItsPlace(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		first := enqueue(t, s, t0, job("a", "default", 0))[0]
		pid := register(t, s, t0)
		require.Equal(t, []int64{first}, ids(claim(t, s, pid, t0, 1).Jobs))
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Others: ran(t, s,
			engine.Transition{ID: first, State: engine.StateScheduled, Wait: time.Second, Error: "boom"})}))
		n, _, err := s.Promote(ctx, engine.At(at(time.Second)), 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, engine.StateReady, state(t, s, first).State)
		second := enqueue(t, s, at(time.Minute), job("a", "default", 0))[0]
		require.Equal(t, 1, state(t, s, first).Attempt)

		moved, err := s.RetryJobs(ctx, engine.At(at(time.Hour)), []int64{first})
		require.NoError(t, err)
		require.Equal(t, []engine.Moved{{ID: first, State: engine.StateReady}}, moved)
		require.Equal(t, 0, state(t, s, first).Attempt, "its attempts reset")
		require.Equal(t, []int64{first, second}, ids(claim(t, s, pid, at(time.Hour), 2).Jobs), "it keeps its place")
	})
}
