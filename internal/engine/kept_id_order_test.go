package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// guarantees.md, "Ordering": "A retried or rate-limited job keeps its id:
// when it is ready again it comes before newer jobs of its priority — but
// while it waits, newer jobs run".
func TestAJobReadyAgainComesBeforeNewerJobsOfItsPriority(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		lim := limits{"sync": spec(t, "sync", 1, time.Second, 1)}
		retried := enqueue(t, s, t0, job("plain", "default", 0))[0]
		limitedIDs := enqueue(t, s, t0, limited("sync", "sync/global"), limited("sync", "sync/global"))
		first, throttled := limitedIDs[0], limitedIDs[1]
		pid := register(t, s, t0)

		res := claimLimited(t, s, pid, t0, 10, lim, 0)
		require.ElementsMatch(t, []int64{retried, first}, ids(res.Jobs))
		require.Len(t, res.Deferred, 1)
		require.Equal(t, throttled, res.Deferred[0].JobID)
		require.Equal(t, at(time.Second), res.Deferred[0].Until)
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(100*time.Millisecond)), engine.Outcomes{
			Completed: runs(t, s, first),
			Others:    ran(t, s, engine.Transition{ID: retried, State: engine.StateScheduled, RunAt: at(time.Second), Error: "boom"}),
		}))

		newer := enqueue(t, s, at(200*time.Millisecond), job("plain", "default", 0))[0]
		require.Equal(t, []int64{newer}, ids(claimLimited(t, s, pid, at(300*time.Millisecond), 10, lim, 0).Jobs),
			"while they wait, newer jobs run")

		later := enqueue(t, s, at(400*time.Millisecond), job("plain", "default", 0), limited("sync", "sync/global"))
		n, _, err := s.Promote(ctx, engine.At(at(time.Second)), 100)
		require.NoError(t, err)
		require.Equal(t, 2, n, "the retry and the rate-limited job are due")
		var order []int64
		for range 3 {
			res := claimLimited(t, s, pid, at(time.Second), 1, lim, 0)
			order = append(order, ids(res.Jobs)...)
		}
		require.Equal(t, []int64{retried, throttled, later[0]}, order,
			"ready again, they come before the jobs enqueued while they waited")
		j := state(t, s, later[1])
		require.Equal(t, engine.StateScheduled, j.State, "the budget's next slot is the newer limited job's")
	})
}
