package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Paused queues' jobs and concurrency slots where they meet the hourly
// clean-up of idle keys, a debounced job that gives its slot back, and a
// job that comes back from running without the slot its key needs
// (released by a worker shutting down, or recovered by the reaper).

// docs/concurrency.md, Idle keys: the clean-up keeps the
// row of a key "with a blocked job" — a paused queue's blocked job too,
// which a freed slot passes over: its row (and the limit it declares) is
// kept through the pause, and after the resume the dispatcher's tick
// hands it the free slot under that limit.
func TestIdleCleanUpKeepsAKeyWhoseOnlyBlockedJobIsInAPausedQueue(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		b1 := enqueue(t, s, t0, slottedIn("bulk", "c", 1))[0]
		b2 := enqueue(t, s, t0, slottedIn("bulk", "c", 1))[0]
		pid := register(t, s, t0)
		res := claim(t, s, pid, t0, 5, "bulk")
		require.Equal(t, []int64{b1}, ids(res.Jobs))
		require.NoError(t, s.PauseQueue(ctx, "bulk", t0))
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(time.Second)), engine.Outcomes{Completed: runsOf(res.Jobs), SlotHolders: runsOf(res.Jobs)}))
		require.Equal(t, engine.StateBlocked, state(t, s, b2).State)
		require.Zero(t, heldMatchesHolders(t, s, "c").Held)

		require.Zero(t, clearIdleSemaphores(t, s, at(3*time.Hour), 500), "c has a blocked job, if of a paused queue")
		require.Contains(t, semaphoreNames(t, s), "c")

		require.NoError(t, s.ResumeQueue(ctx, "bulk", at(3*time.Hour)))
		_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(3*time.Hour)), 10)
		require.NoError(t, err)
		require.Equal(t, 1, unblocked)
		require.Equal(t, engine.StateReady, state(t, s, b2).State)
		sem := heldMatchesHolders(t, s, "c")
		require.Equal(t, 1, sem.Held)
		require.Equal(t, 1, sem.Limit)
	})
}

// A paused queue's due job waits scheduled, holding no
// slot; the clean-up may delete its key's row meanwhile (no slot held, no
// blocked job). After the resume the dispatcher promotes it, creating the
// row again under the job's own To (docs/concurrency.md: "a job that
// comes back to the key meanwhile ... takes a free slot under its own
// To"), and the key counts its holder.
func TestAPausedQueuesDueJobTakesItsSlotAfterItsIdleKeyWasDeleted(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		require.NoError(t, s.PauseQueue(ctx, "bulk", t0))
		j := enqueue(t, s, t0, slottedIn("bulk", "c", 2))[0]
		require.Equal(t, engine.StateScheduled, state(t, s, j).State)
		n, _, err := s.Promote(ctx, engine.At(at(time.Hour)), 10)
		require.NoError(t, err)
		require.Zero(t, n)

		require.Equal(t, 1, clearIdleSemaphores(t, s, at(2*time.Hour), 500))
		require.NotContains(t, semaphoreNames(t, s), "c")

		require.NoError(t, s.ResumeQueue(ctx, "bulk", at(2*time.Hour)))
		n, _, err = s.Promote(ctx, engine.At(at(2*time.Hour)), 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		js := state(t, s, j)
		require.Equal(t, engine.StateReady, js.State)
		require.True(t, js.HoldsSlot)
		sem := heldMatchesHolders(t, s, "c")
		require.Equal(t, 1, sem.Held)
		require.Equal(t, 2, sem.Limit)
	})
}

// A debounced job of a paused queue that holds its key's
// slot (it was ready before the pause) gives it back to the first blocked
// job of a queue not paused, in the call's transaction; coming due while
// its queue is still paused, it stays scheduled and takes no slot; after
// the resume it is promoted, blocked behind the job holding the slot.
func TestADebouncedJobOfAPausedQueueGivesItsSlotToAnotherQueue(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		mk := func() engine.NewJob {
			j := debounced("co/a", "acct/1", time.Second)
			j.Queue = "bulk"
			return j
		}
		a := enqueue(t, s, t0, mk())[0]
		_, _, err := s.Promote(ctx, engine.At(at(time.Second)), 10)
		require.NoError(t, err)
		require.True(t, state(t, s, a).HoldsSlot)
		l := enqueue(t, s, at(time.Second), slottedIn("live", "acct/1", 1))[0]
		require.Equal(t, engine.StateBlocked, state(t, s, l).State)
		require.NoError(t, s.PauseQueue(ctx, "bulk", at(time.Second)))

		res, err := s.Enqueue(ctx, nil, engine.At(at(1500*time.Millisecond)), []engine.NewJob{mk()})
		require.NoError(t, err)
		require.True(t, res[0].Joined)
		require.Equal(t, engine.StateScheduled, res[0].State)
		require.False(t, state(t, s, a).HoldsSlot)
		require.Equal(t, engine.StateReady, state(t, s, l).State, "live's job took the slot")
		require.Equal(t, 1, heldMatchesHolders(t, s, "acct/1").Held)

		n, _, err := s.Promote(ctx, engine.At(at(time.Minute)), 10)
		require.NoError(t, err)
		require.Zero(t, n, "bulk is paused")
		require.Equal(t, engine.StateScheduled, state(t, s, a).State)

		require.NoError(t, s.ResumeQueue(ctx, "bulk", at(time.Minute)))
		n, _, err = s.Promote(ctx, engine.At(at(time.Minute)), 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, engine.StateBlocked, state(t, s, a).State, "behind live's job")
		require.Equal(t, 1, heldMatchesHolders(t, s, "acct/1").Held)
	})
}

// docs/guarantees.md, Queues: "A paused queue's jobs take none of the
// slots they share with other queues' jobs — a rate-limit budget's or a
// concurrency key's ... — which those jobs would otherwise wait behind
// while none of them can run" (the exceptions named: a job that holds a
// slot when its queue is paused keeps it, an operator's retry).
//
// bulk's job R runs and loses its slot when its key expires (Duration:
// presumed lost); bulk is then paused and R comes back from running: its
// worker releases it (a shutdown: Release, or a result that gives the run
// back: Finish), or the reaper recovers it. R had no slot to keep: it
// waits scheduled, due at once, holding none, and live's next job of the
// key takes the free slot. After the resume the dispatcher promotes R,
// blocked behind live's job, which hands it the slot as it completes.
func TestASlotlessJobComingBackToAPausedQueueTakesNoSharedSlot(t *testing.T) {
	ways := map[string]func(t *testing.T, s *engine.Store, pid int64, runs []engine.Run){
		"released": func(t *testing.T, s *engine.Store, pid int64, runs []engine.Run) {
			require.NoError(t, s.Release(context.Background(), pid, engine.At(at(5*time.Minute)), runs))
		},
		"given back by its result": func(t *testing.T, s *engine.Store, pid int64, runs []engine.Run) {
			back := engine.Transition{ID: runs[0].ID, Claim: runs[0].Claim, State: engine.StateReady, AttemptDelta: -1}
			require.NoError(t, s.Finish(context.Background(), pid, engine.At(at(5*time.Minute)), engine.Outcomes{Others: []engine.Transition{back}}))
		},
		"recovered": func(t *testing.T, s *engine.Store, _ int64, _ []engine.Run) {
			n, err := s.ReapDeadProcesses(context.Background(), engine.At(at(5*time.Minute)), 4*time.Minute)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		},
	}
	for name, comeBack := range ways {
		t.Run(name, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, s *engine.Store) {
				ctx := context.Background()
				r := enqueue(t, s, t0, slottedIn("bulk", "c", 1))[0]
				pid := register(t, s, t0)
				res := claim(t, s, pid, t0, 5, "bulk")
				require.Equal(t, []int64{r}, ids(res.Jobs))
				freed, _, err := s.MaintainSemaphores(ctx, engine.At(at(4*time.Minute)), 10)
				require.NoError(t, err)
				require.Equal(t, 1, freed, "R's slot expired")
				require.False(t, state(t, s, r).HoldsSlot)

				require.NoError(t, s.PauseQueue(ctx, "bulk", at(4*time.Minute)))
				comeBack(t, s, pid, runsOf(res.Jobs))
				jr := state(t, s, r)
				require.Equal(t, engine.StateScheduled, jr.State, "R waits for the resume")
				require.False(t, jr.HoldsSlot)
				require.Zero(t, heldMatchesHolders(t, s, "c").Held)

				l := enqueue(t, s, at(5*time.Minute), slottedIn("live", "c", 1))[0]
				require.Equal(t, engine.StateReady, state(t, s, l).State,
					"live's job is %s behind bulk's job (%s, holds a slot: %v), which cannot run while bulk is paused",
					state(t, s, l).State, jr.State, jr.HoldsSlot)
				n, _, err := s.Promote(ctx, engine.At(at(6*time.Minute)), 10)
				require.NoError(t, err)
				require.Zero(t, n, "bulk is paused")

				require.NoError(t, s.ResumeQueue(ctx, "bulk", at(6*time.Minute)))
				n, _, err = s.Promote(ctx, engine.At(at(6*time.Minute)), 10)
				require.NoError(t, err)
				require.Equal(t, 1, n)
				require.Equal(t, engine.StateBlocked, state(t, s, r).State, "behind live's job")

				live := register(t, s, at(6*time.Minute))
				lr := claim(t, s, live, at(6*time.Minute), 5, "live")
				require.Equal(t, []int64{l}, ids(lr.Jobs))
				require.NoError(t, s.Finish(ctx, live, engine.At(at(7*time.Minute)), engine.Outcomes{Completed: runsOf(lr.Jobs), SlotHolders: runsOf(lr.Jobs)}))
				jr = state(t, s, r)
				require.Equal(t, engine.StateReady, jr.State)
				require.True(t, jr.HoldsSlot)
				require.Equal(t, 1, heldMatchesHolders(t, s, "c").Held)
			})
		})
	}
}
