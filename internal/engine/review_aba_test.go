package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A snooze gives its attempt back. Its batch's commit lands but the reply
// is lost, so the recorder writes it again (100 ms later); meanwhile the
// job came due and the same process claimed it again, at the very attempt
// the snoozed run had. The batch written again must not move the new run.
func TestReviewASnoozeWrittenAgainLeavesTheNextRunAtTheSameAttemptAlone(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := enqueue(t, s, t0, job("k", "default", 0))[0]
		pid := register(t, s, t0)
		first := claim(t, s, pid, t0, 1).Jobs
		require.Len(t, first, 1)
		require.Equal(t, 1, first[0].Attempt)
		batch := engine.Outcomes{Others: []engine.Transition{{ID: id, Attempt: 1, State: engine.StateScheduled, AttemptDelta: -1}}}
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), batch))
		require.Equal(t, engine.StateScheduled, state(t, s, id).State)

		_, _, err := s.Promote(ctx, engine.At(at(2*time.Second)), 10)
		require.NoError(t, err)
		second := claim(t, s, pid, at(2*time.Second), 1).Jobs
		require.Len(t, second, 1)
		require.Equal(t, 1, second[0].Attempt, "the new run is at the snoozed run's attempt")

		// The first batch, written again.
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(3*time.Second)), batch))
		j := state(t, s, id)
		require.Equal(t, engine.StateRunning, j.State, "the new run goes on; the stale snooze moved it")
	})
}

// The same with an upstream's 429, which gives the job's concurrency slot
// back: written again, it gives the new run's slot away too, and a second
// job of the key runs beside it under a limit of 1.
func TestReviewA429WrittenAgainGivesTheNextRunsSlotAway(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := enqueue(t, s, t0, slotted("c", 1))[0]
		pid := register(t, s, t0)
		require.Len(t, claim(t, s, pid, t0, 1).Jobs, 1)
		run := engine.Run{ID: id, Attempt: 1}
		batch := engine.Outcomes{
			Others:      []engine.Transition{{ID: id, Attempt: 1, State: engine.StateScheduled, AttemptDelta: -1, Error: "429"}},
			SlotHolders: []engine.Run{run},
		}
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), batch))
		_, _, err := s.Promote(ctx, engine.At(at(2*time.Second)), 10)
		require.NoError(t, err)
		again := claim(t, s, pid, at(2*time.Second), 1).Jobs
		require.Len(t, again, 1)
		require.Equal(t, 1, again[0].Attempt)
		other := enqueue(t, s, at(2*time.Second), slotted("c", 1))[0]
		require.Equal(t, engine.StateBlocked, state(t, s, other).State)

		require.NoError(t, s.Finish(ctx, pid, engine.At(at(3*time.Second)), batch)) // written again
		require.Equal(t, engine.StateBlocked, state(t, s, other).State, "the new run's slot was given to another job of the key")
	})
}
