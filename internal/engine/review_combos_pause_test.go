package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Review (combinations): a queue pause meets a rate limit that two queues
// share, and a concurrency key that two queues share.

// queued is limited(kind, key) in queue q.
func queued(q, key string) engine.NewJob {
	j := limited("k", key)
	j.Queue = q
	return j
}

// parkPausedBacklog parks a backlog of queue bulk on budget g/x (1 a
// second, a 2 s horizon: one admitted at t0, two slotted at 1 s and 2 s,
// the rest parked), then pauses bulk and lets the slotted ones pass: the
// dispatcher promotes them (ready, where claims skip them). Before the
// pause, at t0, live's jobs on the same budget (nLive of them) are parked
// behind bulk's (their ids after theirs), the cursor being past the
// horizon. It returns the parked jobs of bulk and live's.
func parkPausedBacklog(t *testing.T, s *engine.Store, lim limits, pid int64, n, nLive int) (parked, live []int64) {
	t.Helper()
	ctx := context.Background()
	flood := make([]engine.NewJob, n)
	for i := range flood {
		flood[i] = queued("bulk", "g/x")
	}
	got := enqueue(t, s, t0, flood...)
	res := claimLimited(t, s, pid, t0, n, lim, 2*time.Second, "bulk")
	require.Equal(t, got[:1], ids(res.Jobs))
	require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runsOf(res.Jobs)}))
	for _, d := range res.Deferred {
		if d.Parked {
			parked = append(parked, d.JobID)
		}
	}
	require.Len(t, parked, n-3, "one admitted, two slotted within the 2 s horizon, the rest parked")
	if nLive > 0 {
		jobs := make([]engine.NewJob, nLive)
		for i := range jobs {
			jobs[i] = queued("live", "g/x")
		}
		live = enqueue(t, s, t0, jobs...)
		res := claimLimited(t, s, pid, t0, 5, lim, 2*time.Second, "live")
		require.Empty(t, res.Jobs)
		for _, id := range live {
			require.Equal(t, engine.StateParked, state(t, s, id).State, "live's job %d parks behind bulk's", id)
		}
	}
	require.NoError(t, s.PauseQueue(ctx, "bulk", t0))
	_, _, err := s.Promote(ctx, engine.At(at(3*time.Second)), 100)
	require.NoError(t, err)
	return parked, live
}

// docs/guarantees.md, Queues: "`sluice queues pause NAME` stops claims from
// a queue at once ... and its jobs stay where they are until `resume` (the
// dispatcher still makes due ones ready, where claims skip them)". The
// sweep was fixed to leave a paused queue's jobs where they are
// (TestASweepLeavesAPausedQueuesJobsWhereTheyAre), because paused jobs
// moved onto a budget's slots take the slots that another queue's jobs on
// that budget then wait behind, while none of them can run.
//
// The dispatcher's Unpark does the same with a paused queue's parked jobs:
// a parked job is not due (it has no run_at), yet Unpark hands it the
// budget's next slots. Here 6 parked jobs of the paused queue bulk take
// the slots of g/x, which the queue live shares (a kind enqueued into
// either queue, say), and live's two jobs, parked behind them, wait for
// them: the budget has room at 3 s, live's first job gets a slot only
// after all of bulk's (none of which can run).
func TestReviewUnparkLeavesAPausedQueuesParkedJobsWhereTheyAre(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"g": spec(t, "g", 1, time.Second, 1)}
		pid := register(t, s, t0)
		parked, live := parkPausedBacklog(t, s, lim, pid, 9, 2)

		// At 3 s the budget has room (its last admission was at t0). The
		// dispatcher unparks within its 2 s horizon: 3 slots, 3 s, 4 s, 5 s.
		_, err := s.Unpark(ctx, engine.At(at(3*time.Second)), 2*time.Second, 10, 100)
		require.NoError(t, err)
		var moved []int64
		for _, id := range parked {
			if st := state(t, s, id).State; st != engine.StateParked {
				moved = append(moved, id)
			}
		}
		first := state(t, s, live[0])
		require.Empty(t, moved, "Unpark moved jobs %v of the paused queue bulk onto g/x's slots; live's first job is %s (run_at %s), behind them",
			moved, first.State, first.RunAt.Sub(t0))
		require.Equal(t, engine.StateScheduled, first.State, "live's job gets the budget's next slot")
		require.Equal(t, at(3*time.Second), first.RunAt)
	})
}

// The same through a claim: a claim of live that locks g/x hands its
// parked jobs slots (unparkLocked), bulk's paused ones first.
func TestReviewAClaimUnparksNoPausedQueuesParkedJobs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		lim := limits{"g": spec(t, "g", 1, time.Second, 1)}
		pid := register(t, s, t0)
		parked, _ := parkPausedBacklog(t, s, lim, pid, 9, 0)

		// live's job at 3 s is admitted (the budget has room), and its
		// claim hands the budget's parked jobs slots.
		live := enqueue(t, s, at(3*time.Second), queued("live", "g/x"))
		res := claimLimited(t, s, pid, at(3*time.Second), 5, lim, 2*time.Second, "live")
		require.Equal(t, live, ids(res.Jobs))
		var moved []int64
		for _, id := range parked {
			if state(t, s, id).State != engine.StateParked {
				moved = append(moved, id)
			}
		}
		require.Empty(t, moved, "a claim of live moved jobs %v of the paused queue bulk onto g/x's slots (%d slots handed out)", moved, len(res.Unparked))
	})
}

// slottedIn is slotted(key, to) in queue q.
func slottedIn(q, key string, to int) engine.NewJob {
	j := slotted(key, to)
	j.Queue = q
	return j
}

// docs/guarantees.md, Queues: a paused queue's "jobs stay where they are
// until `resume`"; docs/concurrency.md: "every blocked job runs: no
// blocked job stays blocked while its key has a free slot for longer than
// one dispatcher tick".
//
// A concurrency key shared by two queues (one kind enqueued into bulk or
// live; or a Group): bulk's B1 holds the slot and runs, bulk's B2 and
// live's L1 are blocked, in that order. The operator pauses bulk. When B1
// finishes, its slot goes to B2, which cannot run while bulk is paused:
// live's L1 stays blocked for as long as the pause lasts, though no job
// of its key runs. A paused queue's blocked job is moved (blocked to
// ready) and takes the one resource the live queue's job needs, as the
// sweep's and Unpark's moves of paused jobs take a budget's slots.
func TestReviewAFreedSlotSkipsAPausedQueuesBlockedJob(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		b1 := enqueue(t, s, t0, slottedIn("bulk", "c", 1))[0]
		b2 := enqueue(t, s, t0, slottedIn("bulk", "c", 1))[0]
		l1 := enqueue(t, s, t0, slottedIn("live", "c", 1))[0]
		require.Equal(t, engine.StateBlocked, state(t, s, b2).State)
		require.Equal(t, engine.StateBlocked, state(t, s, l1).State)
		pid := register(t, s, t0)
		res := claim(t, s, pid, t0, 5, "bulk")
		require.Equal(t, []int64{b1}, ids(res.Jobs))

		require.NoError(t, s.PauseQueue(ctx, "bulk", t0))
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), engine.Outcomes{Completed: runsOf(res.Jobs), SlotHolders: runsOf(res.Jobs)}))
		_, _, err := s.MaintainSemaphores(ctx, engine.At(at(2*time.Second)), 10)
		require.NoError(t, err)

		got := claim(t, s, pid, at(2*time.Second), 5, "bulk", "live")
		require.Equal(t, []int64{l1}, ids(got.Jobs),
			"nothing of key c runs, yet live's job is %s: the slot went to bulk's job %d (%s, holds a slot: %v), which cannot run while bulk is paused",
			state(t, s, l1).State, b2, state(t, s, b2).State, state(t, s, b2).HoldsSlot)
	})
}
