package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// ExplainFacts reads every fact from one snapshot. Between its read of a
// blocked job and its read of the job's semaphore, another process
// finishes the job holding the key's one slot, which hands the slot to
// the job explained: the facts are all from before the finish (the job
// blocked, the slot held by the other job), never the job blocked behind
// a slot it holds itself.
func TestExplainFactsAreOneSnapshot(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, slotted("k", 1), slotted("k", 1))
		holder, waiter := got[0], got[1]
		pid := register(t, s, t0)
		require.Equal(t, []int64{holder}, ids(claim(t, s, pid, t0, 10).Jobs))
		require.Equal(t, engine.StateBlocked, state(t, s, waiter).State)

		other := open()
		done := runs(t, other, holder)
		d, ok := s.Dialect().(engine.DashboardDialect)
		require.True(t, ok)
		semaphoreRead, _ := d.GetSemaphore("k")
		rs, rec := testdb.Record(s)
		armed := true
		var finishErr error
		rec.Before = func(q string) {
			if !armed || q != semaphoreRead {
				return
			}
			armed = false // the job is read; its semaphore is next
			finishErr = other.Finish(ctx, pid, engine.At(at(time.Second)), engine.Outcomes{Completed: done, SlotHolders: done})
		}
		f, err := rs.ExplainFacts(ctx, waiter, at(time.Second), nil)
		require.NoError(t, err)
		require.False(t, armed, "explain read the semaphore")
		require.NoError(t, finishErr)

		after := state(t, s, waiter)
		require.Equal(t, engine.StateReady, after.State, "the finish handed the slot on")
		require.True(t, after.HoldsSlot)

		require.Equal(t, engine.StateBlocked, f.Job.State)
		require.False(t, f.Job.HoldsSlot)
		require.NotNil(t, f.Semaphore)
		require.Equal(t, []int64{holder}, f.Semaphore.Holders, "the slot's holder as of the job's read")
		require.Equal(t, 1, f.Semaphore.Row.Held)
		require.Zero(t, f.Semaphore.Ahead.N)
	})
}
