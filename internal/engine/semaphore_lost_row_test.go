package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/concurrency.md: "every blocked job runs: no blocked job stays
// blocked while its key has a free slot for longer than one dispatcher
// tick". A blocked job whose key has no semaphore row (it was lost: a
// restore, a hand-made delete, or a transaction that blocked the job
// without creating the row) is found by the dispatcher's tick, which
// creates the row. The row declares no limit then, and the tick handed
// nothing out under a limit of 0, and never looked at the key again (a
// row with no slot free): the job stayed blocked for good. The tick now
// declares the limit of the key's first blocked job, as a job that takes
// a slot of a key with no limit declared does, and hands it the slot; and
// it looks again at a key whose row declares no limit (one such a tick
// left).
func TestABlockedJobWhoseKeyLostItsRowTakesASlotUnderItsOwnLimit(t *testing.T) {
	for name, lose := range map[string]string{
		"no row":   "DELETE FROM sluice_semaphores WHERE name = 'c'",
		"no limit": "UPDATE sluice_semaphores SET held = 0, limit_to = 0 WHERE name = 'c'",
	} {
		t.Run(name, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, s *engine.Store) {
				ctx := context.Background()
				got := enqueue(t, s, t0, slotted("c", 2), slotted("c", 2), slotted("c", 2))
				j := got[2]
				require.Equal(t, engine.StateBlocked, state(t, s, j).State)
				// The holders go (deleted by hand), the blocked job stays,
				// and the key's row is lost.
				for _, q := range []string{fmt.Sprintf("DELETE FROM sluice_jobs WHERE id IN (%d, %d)", got[0], got[1]), lose} {
					_, err := s.DB().Exec(ctx, q)
					require.NoError(t, err)
				}

				_, unblocked, err := s.MaintainSemaphores(ctx, engine.At(at(time.Second)), 10)
				require.NoError(t, err)
				require.Equal(t, 1, unblocked)
				js := state(t, s, j)
				require.Equal(t, engine.StateReady, js.State)
				require.True(t, js.HoldsSlot)
				sem := heldMatchesHolders(t, s, "c")
				require.Equal(t, 1, sem.Held)
				require.Equal(t, 2, sem.Limit, "the blocked job's To")
				require.Equal(t, (3 * time.Minute).Microseconds(), sem.DurationUS, "the blocked job's Duration")
			})
		})
	}
}

// docs/concurrency.md, Idle keys and Lost slots: a job runs past its
// key's Duration (its slot is presumed lost and freed), and for an hour
// more, so that the hourly clean-up deletes the key's idle row while it
// runs; its worker then dies. The reaper recovers it to a key with no
// row; the job takes a slot under its own To, at once or at the
// dispatcher's next tick (a reap may block it without a slot where it
// cannot lock the key), and the key counts its holder.
func TestAJobRecoveredAfterItsIdleKeyWasDeletedTakesASlot(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		r := enqueue(t, s, t0, slotted("c", 2))[0]
		dead := register(t, s, t0)
		require.Equal(t, []int64{r}, ids(claim(t, s, dead, t0, 1).Jobs))
		freed, _, err := s.MaintainSemaphores(ctx, engine.At(at(4*time.Minute)), 10)
		require.NoError(t, err)
		require.Equal(t, 1, freed)
		require.Equal(t, 1, clearIdleSemaphores(t, s, at(2*time.Hour), 500))
		require.NotContains(t, semaphoreNames(t, s), "c")

		n, err := s.ReapDeadProcesses(ctx, engine.At(at(2*time.Hour)), 5*time.Minute)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, _, err = s.MaintainSemaphores(ctx, engine.At(at(2*time.Hour+time.Second)), 10)
		require.NoError(t, err)
		js := state(t, s, r)
		require.Equal(t, engine.StateReady, js.State)
		require.True(t, js.HoldsSlot)
		sem := heldMatchesHolders(t, s, "c")
		require.Equal(t, 1, sem.Held)
		require.Equal(t, 2, sem.Limit)
	})
}
