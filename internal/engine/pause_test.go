package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/guarantees.md, Queues: pausing a queue stops claims from it at
// once. A claim with PromoteDue (what every worker with rate limits sends)
// once took the due jobs waiting on a rate limit without the paused check.
func TestAPausedQueueIsNotClaimedThroughItsDueWaitingJobs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"k": spec(t, "k", 1, time.Second, 1)}
		got := enqueue(t, s, t0, limited("k", "k/x"), limited("k", "k/x"))
		pid := register(t, s, t0)
		res := claimLimited(t, s, pid, t0, 2, lim, 0)
		require.Equal(t, []int64{got[0]}, ids(res.Jobs))
		require.Equal(t, engine.StateScheduled, state(t, s, got[1]).State, "waits on its rate limit until 1 s")

		require.NoError(t, s.PauseQueue(ctx, "default", t0))
		res, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"default"}, Max: 5, Clock: engine.At(at(2 * time.Second)),
			Limits: lim, PromoteDue: true})
		require.NoError(t, err)
		require.Empty(t, ids(res.Jobs), "the queue is paused: nothing may be claimed from it")
		require.NotEqual(t, engine.StateRunning, state(t, s, got[1]).State)
	})
}

// PauseQueue checks the name by the key rule enqueues follow. It once took
// any non-empty name: "mail " was stored as a queue of its own and, on
// MySQL, whose comparisons ignore trailing spaces, paused "mail" too.
func TestPauseQueueChecksTheName(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := enqueue(t, s, t0, job("a", "mail", 0))[0]
		pid := register(t, s, t0)
		if err := s.PauseQueue(ctx, "mail ", t0); err == nil {
			t.Errorf("PauseQueue(%q) succeeded: a queue name no job can have (trailing space) is not refused", "mail ")
		}
		if got := ids(claim(t, s, pid, t0, 5, "mail").Jobs); len(got) != 1 || got[0] != id {
			t.Errorf("pausing %q paused queue mail: claim got %v, want [%d]", "mail ", got, id)
		}
	})
}

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
// them can run. (LockReadyLike, which the sweep takes its batches with,
// lacked the paused check every claim's statement has.)
func TestASweepLeavesAPausedQueuesJobsWhereTheyAre(t *testing.T) {
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
		_, ok, err := s.OverflowSpan(ctx, res.Overflows[0])
		require.NoError(t, err)
		require.False(t, ok, "a paused queue has nothing to sweep: a worker's sweep ends before it begins")
		moved := 0
		for {
			swept, _, err := s.DeferOverflow(ctx, engine.At(t0), res.Overflows[0], time.Minute, 10)
			n := len(swept)
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
		require.Equal(t, at(2*time.Second), j.RunAt, "live's job waits for the budget's next slot (the one after its first job), behind nothing of bulk")

		// Resumed, the queue's flood is swept again, behind live's job.
		require.NoError(t, s.ResumeQueue(ctx, "bulk", at(1600*time.Millisecond)))
		_, ok, err = s.OverflowSpan(ctx, res.Overflows[0])
		require.NoError(t, err)
		require.True(t, ok)
		swept, slots, err := s.DeferOverflow(ctx, engine.At(at(1600*time.Millisecond)), res.Overflows[0], time.Minute, 10)
		n := len(swept)
		require.NoError(t, err)
		require.Equal(t, 10, n)
		require.Equal(t, at(3*time.Second), slots[0])
	})
}
