package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Probe (passes): docs/concurrency.md, "Changing To ... both an enqueue
// ... and a worker's start ... declare one. ... Raising To hands the slots
// it frees to the key's first blocked jobs ... (and the dispatcher's
// upkeep hands out, within a tick, any it could not)" and "every blocked
// job runs: no blocked job stays
// blocked while its key has a free slot for longer than one dispatcher
// tick". A key at To 1 has a holder and three blocked jobs; a deploy
// raises To to 3 and its first enqueue is delayed (it declares the limit
// at once, takes no slot). The two slots the raise frees go to the two
// oldest blocked jobs at the dispatcher's next upkeep, and no more: the
// key never counts more than 3 holders; when the holder finishes, the
// third blocked job gets its slot in the same transaction.
func TestARaisedLimitHandsItsNewSlotsToBlockedJobsWithinATick(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		got := enqueue(t, s, t0, slotted("a", 1), slotted("a", 1), slotted("a", 1), slotted("a", 1))
		for _, id := range got[1:] {
			require.Equal(t, engine.StateBlocked, state(t, s, id).State)
		}
		later := slotted("a", 3)
		later.RunAt = at(time.Hour)
		enqueue(t, s, at(time.Second), later)
		require.Equal(t, 3, semaphore(t, s, "a").Limit)
		_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(2*time.Second)), 100)
		require.NoError(t, err)
		require.Equal(t, 2, unblocked)
		require.Equal(t, engine.StateReady, state(t, s, got[1]).State)
		require.Equal(t, engine.StateReady, state(t, s, got[2]).State)
		require.Equal(t, engine.StateBlocked, state(t, s, got[3]).State)
		require.Equal(t, 3, semaphore(t, s, "a").Held)

		pid := register(t, s, at(3*time.Second))
		res := claim(t, s, pid, at(3*time.Second), 10)
		require.ElementsMatch(t, got[:3], ids(res.Jobs))
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(4*time.Second)), engine.Outcomes{Completed: runs(t, s, got[0]), SlotHolders: runs(t, s, got[0])}))
		require.Equal(t, engine.StateReady, state(t, s, got[3]).State, "the finished holder's slot goes to the last blocked job")
		require.Equal(t, 3, semaphore(t, s, "a").Held)
	})
}
