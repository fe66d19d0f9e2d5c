package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/coalesce"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A queue pause meets a rate limit that two queues share, and a
// concurrency key that two queues share: a paused queue's jobs stay where
// they are and take none of the slots the other queue's jobs wait for.

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
// a queue at once ... and its jobs stay where they are until `resume`".
// Paused jobs moved onto a budget's slots would take the slots that
// another queue's jobs on that budget then wait behind, while none of
// them can run (the sweep leaves them too:
// TestASweepLeavesAPausedQueuesJobsWhereTheyAre).
//
// Here 6 parked jobs of the paused queue bulk wait on g/x, which the queue
// live shares (a kind enqueued into either queue, say), and live's two
// jobs are parked behind them. The budget has room at 3 s: the
// dispatcher's Unpark passes bulk's jobs over and gives live's first job
// the budget's next slot.
func TestUnparkLeavesAPausedQueuesParkedJobsWhereTheyAre(t *testing.T) {
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

// The same through a claim: a claim of live that locks g/x hands slots to
// its parked jobs (unparkLocked), and passes bulk's paused ones over.
func TestAClaimUnparksNoPausedQueuesParkedJobs(t *testing.T) {
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
		require.Equal(t, len(parked), budgetNamed(t, s, "g/x").Parked, "the budget still counts bulk's parked jobs")
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
// finishes, its slot passes B2 over, which cannot run while bulk is
// paused, and goes to L1: had B2 taken it, L1 would stay blocked for as
// long as the pause lasts, though no job of its key runs.
func TestAFreedSlotSkipsAPausedQueuesBlockedJob(t *testing.T) {
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
			"live's job is %s: the slot went to bulk's job %d (%s, holds a slot: %v), which cannot run while bulk is paused",
			state(t, s, l1).State, b2, state(t, s, b2).State, state(t, s, b2).HoldsSlot)
		require.Equal(t, engine.StateBlocked, state(t, s, b2).State, "bulk's job keeps its place")
	})
}

// A paused queue's parked jobs stay counted by their budget, and after the
// resume the dispatcher hands them the budget's slots as any parked job's.
func TestAResumedQueuesParkedJobsGetTheirSlots(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"g": spec(t, "g", 1, time.Second, 1)}
		pid := register(t, s, t0)
		parked, _ := parkPausedBacklog(t, s, lim, pid, 9, 0)

		n, err := s.Unpark(ctx, engine.At(at(3*time.Second)), 2*time.Second, 10, 100)
		require.NoError(t, err)
		require.Zero(t, n, "bulk is paused")
		require.Equal(t, len(parked), budgetNamed(t, s, "g/x").Parked)

		require.NoError(t, s.ResumeQueue(ctx, "bulk", at(3*time.Second)))
		n, err = s.Unpark(ctx, engine.At(at(3*time.Second)), 2*time.Second, 10, 100)
		require.NoError(t, err)
		require.Equal(t, 3, n, "the slots at 3 s, 4 s and 5 s, within the horizon")
		for i, id := range parked[:3] {
			j := state(t, s, id)
			require.Equal(t, engine.StateScheduled, j.State)
			require.Equal(t, at(time.Duration(3+i)*time.Second), j.RunAt)
		}
		for _, id := range parked[3:] {
			require.Equal(t, engine.StateParked, state(t, s, id).State)
		}
		require.Equal(t, len(parked)-3, budgetNamed(t, s, "g/x").Parked)
	})
}

// A budget whose parked jobs all wait for their queue's resume is passed
// over by the dispatcher's Unpark, which would otherwise pick it first
// every tick (its next slot is the soonest), for nothing, and leave the
// budgets behind it out of the tick's limit: here live's jobs parked on
// g/y get their slots with a limit of one budget a tick.
func TestABudgetWhoseParkedJobsAllWaitForAResumeKeepsNoOtherWaiting(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"g": spec(t, "g", 1, time.Second, 1)}
		pid := register(t, s, t0)
		// live's backlog on g/y, half a second after bulk's on g/x: its
		// next slot comes after g/x's.
		flood := make([]engine.NewJob, 5)
		for i := range flood {
			flood[i] = queued("live", "g/y")
		}
		enqueue(t, s, at(500*time.Millisecond), flood...)
		res := claimLimited(t, s, pid, at(500*time.Millisecond), 5, lim, 2*time.Second, "live")
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(500*time.Millisecond)), engine.Outcomes{Completed: runsOf(res.Jobs)}))
		var live []int64
		for _, d := range res.Deferred {
			if d.Parked {
				live = append(live, d.JobID)
			}
		}
		require.Len(t, live, 2)
		parkPausedBacklog(t, s, lim, pid, 9, 0)
		require.Less(t, budgetNamed(t, s, "g/x").NextSlot, budgetNamed(t, s, "g/y").NextSlot, "g/x comes first")

		n, err := s.Unpark(ctx, engine.At(at(3*time.Second)), 2*time.Second, 1, 100)
		require.NoError(t, err)
		require.Equal(t, 2, n, "g/y's parked jobs, though g/x's next slot comes first")
		for _, id := range live {
			require.Equal(t, engine.StateScheduled, state(t, s, id).State)
		}
	})
}

// After the resume, a queue's blocked job takes a free slot of its key
// within a dispatcher tick (MaintainSemaphores), as docs/concurrency.md
// promises every blocked job.
func TestAResumedQueuesBlockedJobTakesAFreeSlotWithinATick(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		b1 := enqueue(t, s, t0, slottedIn("bulk", "c", 1))[0]
		b2 := enqueue(t, s, t0, slottedIn("bulk", "c", 1))[0]
		pid := register(t, s, t0)
		res := claim(t, s, pid, t0, 5, "bulk")
		require.Equal(t, []int64{b1}, ids(res.Jobs))
		require.NoError(t, s.PauseQueue(ctx, "bulk", t0))
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), engine.Outcomes{Completed: runsOf(res.Jobs), SlotHolders: runsOf(res.Jobs)}))
		_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(2*time.Second)), 10)
		require.NoError(t, err)
		require.Zero(t, unblocked, "bulk is paused")
		require.Equal(t, engine.StateBlocked, state(t, s, b2).State)
		require.Zero(t, heldMatchesHolders(t, s, "c").Held)

		require.NoError(t, s.ResumeQueue(ctx, "bulk", at(3*time.Second)))
		_, unblocked, err = s.MaintainSemaphores(ctx, engine.At(at(3*time.Second)), 10)
		require.NoError(t, err)
		require.Equal(t, 1, unblocked)
		require.Equal(t, engine.StateReady, state(t, s, b2).State)
		require.Equal(t, 1, heldMatchesHolders(t, s, "c").Held)
		require.Equal(t, []int64{b2}, ids(claim(t, s, pid, at(3*time.Second), 5, "bulk").Jobs))
	})
}

// raiseLimit declares a higher limit on a concurrency key, with a delayed
// job of queue q (which takes no slot until it is due): the key then has
// free slots and blocked jobs, as after an enqueue that raced a finish,
// until the dispatcher's upkeep hands them out.
func raiseLimit(t *testing.T, s *engine.Store, q, key string, to int) {
	t.Helper()
	j := slottedIn(q, key, to)
	j.RunAt = at(time.Hour)
	enqueue(t, s, t0, j)
}

// The dispatcher's upkeep looks at up to limit keys a tick that have a
// free slot and a blocked job; a key whose blocked jobs all wait for their
// queue's resume is not one of them, or it would come back every tick,
// for nothing, and could keep the others out of the limit.
func TestBlockedJobsOfAPausedQueueKeepNoKeyWaiting(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		enqueue(t, s, t0, slottedIn("bulk", "c/a", 1), slottedIn("live", "c/b", 1))
		a2 := enqueue(t, s, t0, slottedIn("bulk", "c/a", 1))[0]
		b2 := enqueue(t, s, t0, slottedIn("live", "c/b", 1))[0]
		require.NoError(t, s.PauseQueue(ctx, "bulk", t0))
		raiseLimit(t, s, "bulk", "c/a", 2)
		raiseLimit(t, s, "live", "c/b", 2)

		_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(time.Second)), 1)
		require.NoError(t, err)
		require.Equal(t, 1, unblocked)
		require.Equal(t, engine.StateReady, state(t, s, b2).State, "live's job takes c/b's free slot")
		require.Equal(t, engine.StateBlocked, state(t, s, a2).State, "bulk's job waits for the resume")
		heldMatchesHolders(t, s, "c/a")
		heldMatchesHolders(t, s, "c/b")
	})
}

// docs/guarantees.md, Queues: the dispatcher makes a paused queue's due
// jobs ready, but for those that need a concurrency slot: they stay
// scheduled until the resume, holding none of the slots another queue's
// jobs of their key need, and are then promoted as any due job is.
func TestAPausedQueuesDueJobTakesNoSlotUntilTheResume(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		d := slottedIn("bulk", "c", 1)
		d.RunAt = at(time.Second)
		due := enqueue(t, s, t0, d)[0]
		require.NoError(t, s.PauseQueue(ctx, "bulk", t0))
		n, _, err := s.Promote(ctx, engine.At(at(2*time.Second)), 10)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, engine.StateScheduled, state(t, s, due).State)
		require.Zero(t, heldMatchesHolders(t, s, "c").Held)

		l := enqueue(t, s, at(2*time.Second), slottedIn("live", "c", 1))[0]
		require.Equal(t, engine.StateReady, state(t, s, l).State, "live's job takes the free slot")

		require.NoError(t, s.ResumeQueue(ctx, "bulk", at(3*time.Second)))
		n, _, err = s.Promote(ctx, engine.At(at(3*time.Second)), 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, engine.StateBlocked, state(t, s, due).State, "promoted after the resume: blocked behind live's job")
		heldMatchesHolders(t, s, "c")
	})
}

// A job enqueued into a paused queue takes no concurrency slot either: it
// waits, scheduled and due, for the resume — a plain job, a coalescing job
// just created, and a full coalescing job its call dispatches.
func TestAJobEnqueuedIntoAPausedQueueTakesNoSlot(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		require.NoError(t, s.PauseQueue(ctx, "bulk", t0))
		collect := func() engine.NewJob {
			j := slottedIn("bulk", "c", 3)
			j.Coalesce = &engine.Coalesce{Key: "co/full", Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Collect, MaxCalls: 2,
				Dispatch: true, Debounce: time.Minute}}
			return j
		}
		coalescing := slottedIn("bulk", "c", 3)
		coalescing.Coalesce = &engine.Coalesce{Key: "co/new", Rule: coalesce.Spec{Scope: "co", OnConflict: coalesce.Discard}}
		res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{slottedIn("bulk", "c", 3), coalescing, collect()})
		require.NoError(t, err)
		require.Equal(t, engine.StateScheduled, res[0].State, "a plain job")
		require.Equal(t, engine.StateScheduled, res[1].State, "a coalescing job just created")
		require.Equal(t, engine.StateScheduled, res[2].State, "debounced")
		full, err := s.Enqueue(ctx, nil, engine.At(at(time.Second)), []engine.NewJob{collect()})
		require.NoError(t, err)
		require.True(t, full[0].Joined)
		require.Equal(t, engine.StateScheduled, full[0].State, "dispatched, but its queue is paused")
		for _, r := range res {
			j := state(t, s, r.ID)
			require.Equal(t, engine.StateScheduled, j.State)
			require.False(t, j.HoldsSlot)
			require.False(t, j.RunAt.After(at(time.Second)), "due")
		}
		require.Zero(t, heldMatchesHolders(t, s, "c").Held)
		require.Equal(t, 3, semaphore(t, s, "c").Limit, "the jobs declared their limit")

		require.NoError(t, s.ResumeQueue(ctx, "bulk", at(2*time.Second)))
		n, _, err := s.Promote(ctx, engine.At(at(2*time.Second)), 10)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		for _, r := range res {
			require.Equal(t, engine.StateReady, state(t, s, r.ID).State)
		}
		require.Equal(t, 3, heldMatchesHolders(t, s, "c").Held)
	})
}
