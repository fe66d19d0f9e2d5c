package engine_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A transition's Wait (a retry's backoff, a snooze) is resolved into a run
// time no earlier than the finish and no later than MaxRunAt, the latest
// run time a job may have: a negative Wait scheduled the job in the past,
// and a long one from a clock near the end of the year 9999 past MaxRunAt.
func TestAWaitIsResolvedWithinTheRunTimesAJobMayHave(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		now := engine.MaxRunAt.Add(-time.Hour).Truncate(time.Second)
		got := enqueue(t, s, now, job("k", "default", 0), job("k", "default", 0), job("k", "default", 0))
		pid := register(t, s, now)
		require.Len(t, claim(t, s, pid, now, 3).Jobs, 3)
		require.NoError(t, s.Finish(ctx, pid, engine.At(now), engine.Outcomes{Others: []engine.Transition{
			{ID: got[0], Claim: 1, State: engine.StateScheduled, Wait: -time.Hour, Error: "boom"},
			{ID: got[1], Claim: 1, State: engine.StateScheduled, Wait: math.MaxInt64, Error: "boom"},
			{ID: got[2], Claim: 1, State: engine.StateScheduled, Wait: 2 * time.Hour, AttemptDelta: -1},
		}}))
		require.Equal(t, now, state(t, s, got[0]).RunAt, "a negative wait waits none")
		require.Equal(t, engine.MaxRunAt, state(t, s, got[1]).RunAt)
		require.Equal(t, engine.MaxRunAt, state(t, s, got[2]).RunAt)
		for _, id := range got {
			require.Equal(t, engine.StateScheduled, state(t, s, id).State)
		}
	})
}
