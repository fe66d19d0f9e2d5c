package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/guarantees.md, Queues: "`sluice queues pause NAME` stops claims from
// a queue at once ... and its jobs stay where they are until `resume` (the
// dispatcher still makes due ones ready, where claims skip them)."
//
// A flood on a budget g/x, which queue "bulk" and queue "live" share (a
// Group): a claim from bulk defers one of it while more are ready, and its
// worker sweeps the rest (DeferOverflow). The operator pauses bulk. The
// sweep must leave the paused queue's ready jobs where they are: moved
// onto the budget's slots and parked, they take the slots that a job of
// live, deferred on the same budget, then waits behind, while none of
// them can run.
func TestReviewASweepLeavesAPausedQueuesJobsWhereTheyAre(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"g": spec(t, "g", 1, time.Second, 1)}
		flood := make([]engine.NewJob, 40)
		for i := range flood {
			flood[i] = limited("k", "g/x")
			flood[i].Queue = "bulk"
		}
		got := enqueue(t, s, t0, flood...)
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 2, lim, time.Minute, "bulk")
		require.Equal(t, got[:1], ids(res.Jobs))
		require.Len(t, res.Overflows, 1, "the claim saw a flood behind the job it deferred")

		require.NoError(t, s.PauseQueue(ctx, "bulk", t0))
		moved := 0
		for {
			n, _, err := s.DeferOverflow(ctx, engine.At(t0), res.Overflows[0], time.Minute, 10)
			require.NoError(t, err)
			moved += n
			if n < 10 {
				break
			}
		}
		ready := 0
		for _, id := range got[2:] {
			if state(t, s, id).State == engine.StateReady {
				ready++
			}
		}

		// A job of live on the same budget, deferred at t0+1.5s.
		live := limited("k", "g/x")
		live.Queue = "live"
		liveID := enqueue(t, s, at(time.Second), live)[0]
		lr := claimLimited(t, s, pid, at(time.Second), 2, lim, time.Minute, "live")
		require.Equal(t, []int64{liveID}, ids(lr.Jobs), "the budget admits live's job at 1 s")
		second := enqueue(t, s, at(1500*time.Millisecond), live)[0]
		lr = claimLimited(t, s, pid, at(1500*time.Millisecond), 2, lim, time.Minute, "live")
		require.Len(t, lr.Deferred, 1)
		j := state(t, s, second)

		require.Zero(t, moved, "the sweep moved %d jobs of the paused queue (%d of its 38 left ready); live's next job then waits %s for its slot, or parks (%s), behind them",
			moved, ready, j.RunAt.Sub(at(1500*time.Millisecond)), j.State)
	})
}
