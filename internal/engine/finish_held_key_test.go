package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
)

// finishUnwaiting runs FinishUnwaiting while the app's transaction tx
// stays open, and fails the test (ending tx) if it waits for it.
func finishUnwaiting(t *testing.T, s *engine.Store, tx appTx, pid int64, c engine.Clock, o engine.Outcomes) []int64 {
	t.Helper()
	var left []int64
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		left, err = s.FinishUnwaiting(context.Background(), pid, c, o)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		tx.rollback()
		<-done
		t.Fatal("FinishUnwaiting waited for the app's open transaction")
	}
	require.NoError(t, err)
	return left
}

// docs/concurrency.md, How slots move: a worker's results wait for no
// semaphore another transaction holds. An app's open transaction that
// enqueued a job of keys c and e (EnqueueTx) holds their semaphores; a
// batch of results gives back the slots of c1 (completed) and e1 (failed
// for good), and completes d1 (key d) and u (no limit). The batch writes
// d1's and u's results at once and leaves c1's and e1's whole: still
// running, holding their slots, no failed attempt kept. Once the app
// commits, writing them again gives each slot back once, to the app's
// blocked jobs, and a third write changes nothing.
func TestFinishUnwaitingLeavesOnlyTheResultsOfHeldKeys(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, _ func() *engine.Store, app func() appDB) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		got := enqueue(t, s, t0, slotted("c", 1), slotted("d", 1), slotted("e", 1), job("k", "default", 0))
		c1, d1, e1, u := got[0], got[1], got[2], got[3]
		pid := register(t, s, t0)
		res := claim(t, s, pid, t0, 5)
		require.ElementsMatch(t, got, ids(res.Jobs))
		run := map[int64]engine.Run{}
		for _, j := range res.Jobs {
			run[j.ID] = j.Run()
		}

		a := app()
		tx := a.begin(t)
		ended := false
		defer func() {
			if !ended {
				tx.rollback()
			}
		}()
		mine, err := a.s.Enqueue(ctx, tx.ex, engine.At(at(time.Second)), []engine.NewJob{slotted("c", 1), slotted("e", 1)})
		require.NoError(t, err)
		appC, appE := mine[0].ID, mine[1].ID

		failed := engine.Transition{ID: e1, Claim: run[e1].Claim, State: engine.StateFailed, Error: "boom", Finished: true}
		o := engine.Outcomes{
			Completed:   []engine.Run{run[c1], run[d1], run[u]},
			Others:      []engine.Transition{failed},
			SlotHolders: []engine.Run{run[c1], run[d1], run[e1]},
		}
		left := finishUnwaiting(t, s, tx, pid, engine.At(at(2*time.Second)), o)
		require.Equal(t, []int64{c1, e1}, left, "the results of the held keys are left")
		require.Equal(t, engine.StateCompleted, state(t, s, d1).State)
		require.Equal(t, engine.StateCompleted, state(t, s, u).State)
		for _, id := range []int64{c1, e1} {
			j := state(t, s, id)
			require.Equal(t, engine.StateRunning, j.State, "job %d: its result waits for its key", id)
			require.True(t, j.HoldsSlot, "job %d keeps its slot until its result is written", id)
			kept, err := s.Attempts(ctx, id)
			require.NoError(t, err)
			require.Empty(t, kept, "job %d: no failed attempt kept yet", id)
		}
		require.Zero(t, heldMatchesHolders(t, s, "d").Held, "d1's slot went back with its result")
		require.NoError(t, tx.commit())
		ended = true
		require.Equal(t, engine.StateBlocked, state(t, s, appC).State)
		require.Equal(t, engine.StateBlocked, state(t, s, appE).State)

		// Decided on the database's clock, as a worker's results are.
		dbClock := engine.DatabaseTime(fixed(at(3 * time.Second)))
		left, err = s.FinishUnwaiting(ctx, pid, dbClock, o)
		require.NoError(t, err)
		require.Empty(t, left, "the keys are free")
		require.Equal(t, engine.StateCompleted, state(t, s, c1).State)
		require.Equal(t, engine.StateFailed, state(t, s, e1).State)
		kept, err := s.Attempts(ctx, e1)
		require.NoError(t, err)
		require.Len(t, kept, 1, "e1's failed attempt is kept once")
		for key, holder := range map[string]int64{"c": appC, "e": appE} {
			require.Equal(t, engine.StateReady, state(t, s, holder).State, "the slot of %s went to the app's job", key)
			sem := heldMatchesHolders(t, s, key)
			require.Equal(t, 1, sem.Held, "%s: one slot given back, one handed out", key)
			require.InDelta(t, time.Now().UnixMicro(), sem.UpdatedAt, float64(time.Hour.Microseconds()),
				"%s: its activity is stamped on the database's clock, read with its lock", key)
		}

		left, err = s.FinishUnwaiting(ctx, pid, engine.At(at(4*time.Second)), o)
		require.NoError(t, err)
		require.Empty(t, left)
		for _, key := range []string{"c", "e"} {
			require.Equal(t, 1, heldMatchesHolders(t, s, key).Held, "%s: a result written again gives nothing back", key)
		}
		kept, err = s.Attempts(ctx, e1)
		require.NoError(t, err)
		require.Len(t, kept, 1)
	})
}

// A result that gives its run back (a worker could not run it) for a job
// that lost its slot while it ran (its key expired) needs a slot of its
// key to become ready. While an app's open transaction holds the key,
// FinishUnwaiting blocks it instead, as a reap does, and waits for
// nothing: it takes a slot as blocked jobs do.
func TestFinishUnwaitingBlocksASlotlessJobOfAHeldKey(t *testing.T) {
	eachApp(t, func(t *testing.T, s *engine.Store, _ func() *engine.Store, app func() appDB) {
		if s.Dialect().Name() == "sqlite" {
			t.Skip("one writer: an open transaction stops every other")
		}
		ctx := context.Background()
		r := enqueue(t, s, t0, slotted("c", 2))[0]
		pid := register(t, s, t0)
		res := claim(t, s, pid, t0, 5)
		require.Equal(t, []int64{r}, ids(res.Jobs))
		freed, _, err := s.MaintainSemaphores(ctx, engine.At(at(4*time.Minute)), 10)
		require.NoError(t, err)
		require.Equal(t, 1, freed, "r's slot expired")

		a := app()
		tx := a.begin(t)
		_, err = a.s.Enqueue(ctx, tx.ex, engine.At(at(4*time.Minute)), []engine.NewJob{slotted("c", 2)})
		require.NoError(t, err)
		run := res.Jobs[0].Run()
		back := engine.Transition{ID: r, Claim: run.Claim, State: engine.StateReady, AttemptDelta: -1}
		left := finishUnwaiting(t, s, tx, pid, engine.At(at(5*time.Minute)), engine.Outcomes{Others: []engine.Transition{back}})
		require.Empty(t, left, "it gives no slot back: nothing is left")
		jr := state(t, s, r)
		require.Equal(t, engine.StateBlocked, jr.State)
		require.False(t, jr.HoldsSlot)
		require.NoError(t, tx.commit())

		_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(5*time.Minute)), 10)
		require.NoError(t, err)
		require.Equal(t, 1, unblocked, "the dispatcher hands it the free slot")
		jr = state(t, s, r)
		require.Equal(t, engine.StateReady, jr.State)
		require.True(t, jr.HoldsSlot)
		require.Equal(t, 2, heldMatchesHolders(t, s, "c").Held)
	})
}
