package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A pending job that collected calls, a blocked job
// and a paused queue survive a revert and a re-apply of the newest
// migrations (015 to 020: fair priorities, parked fair jobs, claims,
// waiting fair jobs, delayed jobs, coalesce keys) and work after it: the
// next call of the key joins the same job, whose claim brings every call;
// the blocked job takes the slot its holder gives back; the queue is still
// paused.
func TestCoalescingAndBlockedJobsWorkAfterARoundTripOfTheNewestMigrations(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pending := collected(t, s, "shop", 3)
		conc := func() engine.NewJob {
			j := job("conc", "default", 0)
			j.Conc = &engine.Conc{Key: "conc/one", To: 1, Duration: 3 * time.Minute}
			return j
		}
		holder := enqueue(t, s, t0, conc())[0]
		blocked := enqueue(t, s, t0, conc())[0]
		require.Equal(t, engine.StateBlocked, state(t, s, blocked).State)
		require.NoError(t, s.PauseQueue(ctx, "paused", t0))

		reverted, err := s.MigrateDown(ctx, 6)
		require.NoError(t, err)
		require.Len(t, reverted, 6)
		_, err = s.MigrateUp(ctx, 0)
		require.NoError(t, err)

		require.Equal(t, pending, collected(t, s, "shop", 1), "the next call joins the pending job")
		require.Equal(t, 3, calls(t, s, pending))
		pid := register(t, s, t0)
		res := claim(t, s, pid, t0, 10)
		require.ElementsMatch(t, []int64{pending, holder}, ids(res.Jobs))
		for _, j := range res.Jobs {
			if j.ID == pending {
				require.Len(t, j.CallArgs, 4, "every call reaches the handler")
			}
		}
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runs(t, s, holder), SlotHolders: runs(t, s, holder)}))
		require.Equal(t, engine.StateReady, state(t, s, blocked).State, "the blocked job took the slot")
		qs, err := s.ListQueues(ctx)
		require.NoError(t, err)
		require.Contains(t, qs, engine.QueueInfo{Name: "paused", Paused: true})
	})
}
