package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// guarantees.md, "A worker that pauses": the results of the runs a worker
// presumed dead had in flight are ignored, and jobs it claims after
// coming back, before its heartbeat tells it, are its own. Such a job runs
// twice under one process id: its lost run (attempt 1) and its new one
// (attempt 2). Whatever the lost run's result says — a completion, an
// upstream's 429 with its budget push, a release at shutdown — it changes
// nothing of the new run: the job, its concurrency slot and its budget
// stay as they are. The new run's own result counts.
func TestALostRunsResultLeavesTheRunThatReplacedItUnderTheSameProcessAlone(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"r": spec(t, "r", 100, time.Second, 100)}
		params := lim["r"].Params
		id := enqueue(t, s, t0, slottedLimited("r/1", "c"))[0]
		pid := register(t, s, t0)
		require.Len(t, claimLimited(t, s, pid, t0, 1, lim, 0).Jobs, 1)
		_, err := s.ReapDeadProcesses(ctx, engine.At(at(10*time.Minute)), 5*time.Minute)
		require.NoError(t, err)
		again := claimLimited(t, s, pid, at(10*time.Minute), 1, lim, 0).Jobs
		require.Len(t, again, 1)
		require.Equal(t, 2, again[0].Attempt)
		lost, live := engine.Run{ID: id, Claim: 1}, engine.Run{ID: id, Claim: 2}
		tat := budgetNamed(t, s, "r/1").TAT

		unchanged := func(what string) {
			t.Helper()
			j := state(t, s, id)
			require.Equal(t, engine.StateRunning, j.State, "%s: the new run goes on", what)
			require.Equal(t, pid, j.ProcessID, what)
			require.Equal(t, 2, j.Attempt, what)
			require.True(t, j.HoldsSlot, "%s: the new run keeps its slot", what)
			require.Equal(t, 1, semaphore(t, s, "c").Held, "%s: the slot is not given back", what)
			require.Equal(t, tat, budgetNamed(t, s, "r/1").TAT, "%s: the budget is not held back", what)
		}
		later := engine.At(at(11 * time.Minute))
		require.NoError(t, s.Finish(ctx, pid, later, engine.Outcomes{Completed: []engine.Run{lost}, SlotHolders: []engine.Run{lost}}))
		unchanged("a completion")
		require.NoError(t, s.Finish(ctx, pid, later, engine.Outcomes{
			Others: []engine.Transition{{ID: id, Claim: 1, State: engine.StateScheduled, Wait: time.Hour, AttemptDelta: -1,
				Error: "429", WaitKey: "r/1"}},
			SlotHolders: []engine.Run{lost},
			Pushes:      []engine.BudgetPush{{Key: "r/1", Wait: time.Hour, Params: params, Run: lost}},
		}))
		unchanged("a 429")
		require.NoError(t, s.Finish(ctx, pid, later, engine.Outcomes{
			Others: []engine.Transition{{ID: id, Claim: 1, State: engine.StateReady, RunAt: at(11 * time.Minute), AttemptDelta: -1}},
		}))
		unchanged("a result given back")
		require.NoError(t, s.Release(ctx, pid, later, []engine.Run{lost}))
		unchanged("a release")
		as, err := s.Attempts(ctx, id)
		require.NoError(t, err)
		require.Len(t, as, 1, "only the lost run, as the reaper kept it: %+v", as)

		// Both runs' results in one batch: the new run's counts.
		require.NoError(t, s.Finish(ctx, pid, later, engine.Outcomes{
			Completed:   []engine.Run{live},
			Others:      []engine.Transition{{ID: id, Claim: 1, State: engine.StateFailed, Error: "stale", Finished: true}},
			SlotHolders: []engine.Run{lost, live},
		}))
		j := state(t, s, id)
		require.Equal(t, engine.StateCompleted, j.State)
		require.False(t, j.HoldsSlot)
		require.Zero(t, semaphore(t, s, "c").Held, "the slot is given back once")
		as, err = s.Attempts(ctx, id)
		require.NoError(t, err)
		require.Len(t, as, 1, "the lost run's failure keeps nothing: %+v", as)
	})
}

// guarantees.md, "Nothing lost": results are written until they land; a
// batch whose commit landed but whose reply was lost is written again.
// Written again, it gives no slot back a second time (the slot it gave
// went to the job blocked on its key, which now runs) and holds no budget
// back again.
func TestAResultWrittenAgainGivesItsSlotAndItsBudgetOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"r": spec(t, "r", 100, time.Second, 100)}
		params := lim["r"].Params
		first, second := slotted("c", 1), slotted("c", 1)
		got := enqueue(t, s, t0, first, second, limited("k", "r/1"))
		require.Equal(t, engine.StateBlocked, state(t, s, got[1]).State)
		pid := register(t, s, t0)
		claimed := claimLimited(t, s, pid, t0, 10, lim, 0).Jobs
		require.ElementsMatch(t, []int64{got[0], got[2]}, ids(claimed))
		done := engine.Run{ID: got[0], Claim: 1}
		throttled := engine.Run{ID: got[2], Claim: 1}
		batch := engine.Outcomes{
			Completed:   []engine.Run{done},
			SlotHolders: []engine.Run{done},
			Others: []engine.Transition{{ID: got[2], Claim: 1, State: engine.StateScheduled, Wait: time.Minute, AttemptDelta: -1,
				Error: "429", WaitKey: "r/1"}},
			Pushes: []engine.BudgetPush{{Key: "r/1", Wait: time.Minute, Params: params, Run: throttled}},
		}
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), batch))
		tat := budgetNamed(t, s, "r/1").TAT
		require.Equal(t, engine.StateReady, state(t, s, got[1]).State, "the slot went to the blocked job")
		require.Equal(t, []int64{got[1]}, ids(claimLimited(t, s, pid, at(2*time.Second), 10, lim, 0).Jobs))

		// The same batch, written again half a minute later.
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(30*time.Second)), batch))
		require.Equal(t, 1, semaphore(t, s, "c").Held, "the slot is given back once")
		j := state(t, s, got[1])
		require.Equal(t, engine.StateRunning, j.State)
		require.True(t, j.HoldsSlot)
		require.Equal(t, tat, budgetNamed(t, s, "r/1").TAT, "the budget is held back once")
		require.Equal(t, engine.StateScheduled, state(t, s, got[2]).State)
	})
}

// guarantees.md, "Nothing lost": a snooze gives its attempt back. Its
// batch's commit lands but the reply is lost, so the recorder writes it
// again (100 ms later); meanwhile the job came due and the same process
// claimed it again, at the very attempt the snoozed run had. Runs are
// matched by claim, which never goes back: the batch written again leaves
// the new run alone.
func TestASnoozeWrittenAgainLeavesTheNextRunAtTheSameAttemptAlone(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := enqueue(t, s, t0, job("k", "default", 0))[0]
		pid := register(t, s, t0)
		first := claim(t, s, pid, t0, 1).Jobs
		require.Len(t, first, 1)
		require.Equal(t, 1, first[0].Attempt)
		require.Equal(t, int64(1), first[0].Claims)
		batch := engine.Outcomes{Others: []engine.Transition{{ID: id, Claim: 1, State: engine.StateScheduled, AttemptDelta: -1}}}
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), batch))
		require.Equal(t, engine.StateScheduled, state(t, s, id).State)

		_, _, err := s.Promote(ctx, engine.At(at(2*time.Second)), 10)
		require.NoError(t, err)
		second := claim(t, s, pid, at(2*time.Second), 1).Jobs
		require.Len(t, second, 1)
		require.Equal(t, 1, second[0].Attempt, "the new run is at the snoozed run's attempt")
		require.Equal(t, int64(2), second[0].Claims, "but is a later claim")

		// The first batch, written again.
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(3*time.Second)), batch))
		j := state(t, s, id)
		require.Equal(t, engine.StateRunning, j.State, "the new run goes on")
		require.Equal(t, 1, j.Attempt)

		// The new run's own result counts.
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(4*time.Second)), engine.Outcomes{Completed: runsOf(second)}))
		require.Equal(t, engine.StateCompleted, state(t, s, id).State)
	})
}

// The same with an upstream's 429, which gives the job's concurrency slot
// back and holds its budget back: written again after the job was claimed
// again at the same attempt, it gives the new run's slot away to no other
// job of the key and holds the budget back no further.
func TestA429WrittenAgainLeavesTheNextRunsSlotAndBudgetAlone(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"r": spec(t, "r", 100, time.Second, 100)}
		params := lim["r"].Params
		id := enqueue(t, s, t0, slottedLimited("r/1", "c"))[0]
		pid := register(t, s, t0)
		require.Len(t, claimLimited(t, s, pid, t0, 1, lim, 0).Jobs, 1)
		run := engine.Run{ID: id, Claim: 1}
		batch := engine.Outcomes{
			Others: []engine.Transition{{ID: id, Claim: 1, State: engine.StateScheduled, Wait: 100 * time.Millisecond, AttemptDelta: -1,
				Error: "429", WaitKey: "r/1"}},
			SlotHolders: []engine.Run{run},
			Pushes:      []engine.BudgetPush{{Key: "r/1", Wait: 100 * time.Millisecond, Params: params, Run: run}},
		}
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), batch))
		_, _, err := s.Promote(ctx, engine.At(at(2*time.Second)), 10)
		require.NoError(t, err)
		again := claimLimited(t, s, pid, at(2*time.Second), 1, lim, 0).Jobs
		require.Len(t, again, 1)
		require.Equal(t, 1, again[0].Attempt)
		require.Equal(t, int64(2), again[0].Claims)
		other := enqueue(t, s, at(2*time.Second), slotted("c", 1))[0]
		require.Equal(t, engine.StateBlocked, state(t, s, other).State)
		tat := budgetNamed(t, s, "r/1").TAT

		require.NoError(t, s.Finish(ctx, pid, engine.At(at(3*time.Second)), batch)) // written again
		require.Equal(t, engine.StateBlocked, state(t, s, other).State, "the new run keeps its slot")
		require.Equal(t, 1, semaphore(t, s, "c").Held)
		j := state(t, s, id)
		require.Equal(t, engine.StateRunning, j.State)
		require.True(t, j.HoldsSlot)
		require.Equal(t, tat, budgetNamed(t, s, "r/1").TAT, "the budget is held back once")
	})
}

// A release (a worker's shutdown, or a claim whose reply was lost) gives
// the attempt back too; the job claimed again by the same process runs at
// the same attempt. A release of the first run, made again, leaves the new
// run alone.
func TestAReleaseMadeAgainLeavesTheNextRunAtTheSameAttemptAlone(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		id := enqueue(t, s, t0, slotted("c", 1))[0]
		pid := register(t, s, t0)
		first := claim(t, s, pid, t0, 1).Jobs
		require.Len(t, first, 1)
		require.NoError(t, s.Release(ctx, pid, engine.At(at(time.Second)), runsOf(first)))
		require.Equal(t, engine.StateReady, state(t, s, id).State)
		second := claim(t, s, pid, at(2*time.Second), 1).Jobs
		require.Len(t, second, 1)
		require.Equal(t, first[0].Attempt, second[0].Attempt)

		require.NoError(t, s.Release(ctx, pid, engine.At(at(3*time.Second)), runsOf(first)))
		j := state(t, s, id)
		require.Equal(t, engine.StateRunning, j.State, "the new run goes on")
		require.True(t, j.HoldsSlot)
		require.Equal(t, 1, semaphore(t, s, "c").Held)
		require.NoError(t, s.Release(ctx, pid, engine.At(at(4*time.Second)), runsOf(second)))
		require.Equal(t, engine.StateReady, state(t, s, id).State, "the new run's own release counts")
	})
}

// Migration 017 adds the claims counter at 0: a job that was running when
// it ran is claim 0 in its row, and the run a worker made of it is claim
// 0 as it remembers it. Its result lands.
func TestARunClaimedBeforeTheClaimsCounterFinishes(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, slotted("c", 1), slotted("c", 1), job("k", "default", 0))
		pid := register(t, s, t0)
		require.Len(t, claim(t, s, pid, t0, 10).Jobs, 2)
		_, err := s.DB().Exec(ctx, "UPDATE sluice_jobs SET claims = 0")
		require.NoError(t, err)
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), engine.Outcomes{
			Completed:   []engine.Run{{ID: got[0], Claim: 0}},
			SlotHolders: []engine.Run{{ID: got[0], Claim: 0}},
			Others:      []engine.Transition{{ID: got[2], Claim: 0, State: engine.StateFailed, Error: "boom", Finished: true}},
		}))
		require.Equal(t, engine.StateCompleted, state(t, s, got[0]).State)
		require.Equal(t, engine.StateFailed, state(t, s, got[2]).State)
		require.Equal(t, engine.StateReady, state(t, s, got[1]).State, "the slot went to the blocked job")
		again := claim(t, s, pid, at(2*time.Second), 10).Jobs
		require.Len(t, again, 1)
		require.Equal(t, int64(1), again[0].Claims)
	})
}
