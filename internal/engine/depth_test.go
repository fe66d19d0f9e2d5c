package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Depth and OldestWaiting read each waiting state through its own index;
// this puts a job in every state and checks each is counted once, and
// finished jobs not at all.
func TestDepthAndOldestWaitingCoverEveryState(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		lim := limits{"sync": spec(t, "sync", 1, time.Minute, 1), "slow": spec(t, "slow", 1, time.Hour, 1)}

		// In queue "work": one completed, one failed, one running.
		work := enqueue(t, s, t0, job("a", "work", 0), job("a", "work", 0), job("a", "work", 0))
		require.Len(t, claim(t, s, pid, t0, 3, "work").Jobs, 3)
		require.NoError(t, s.Finish(ctx, pid, engine.At(t0), engine.Outcomes{Completed: runs(t, s, work[0]), Others: ran(t, s,
			engine.Transition{ID: work[1], State: engine.StateFailed, Error: "boom", Finished: true})}))

		// In "default", enqueued a minute later: two ready, one scheduled
		// for later, one holding a concurrency slot and one blocked on it,
		// and in "limited" two jobs on each of two budgets: one of each is
		// admitted (and runs), one waits scheduled for its slot a minute
		// away, and one is parked (its slot is an hour away).
		t1 := at(time.Minute)
		later := job("a", "default", 0)
		later.RunAt = at(time.Hour)
		conc := job("c", "default", 0)
		conc.Conc = &engine.Conc{Key: "c/1", To: 1}
		enqueue(t, s, t1, job("a", "default", 0), job("a", "default", 0), later, conc, conc)
		res := claimLimited(t, s, pid, t1, 2, lim, 0, "limited")
		require.Empty(t, res.Jobs)
		sync, slow := limited("sync", "sync/global"), limited("slow", "slow/global")
		sync.Queue, slow.Queue = "limited", "limited"
		enqueue(t, s, t1, sync, sync, slow, slow)
		res = claimLimited(t, s, pid, t1, 4, lim, 0, "limited")
		require.Len(t, res.Jobs, 2)
		require.Len(t, res.Deferred, 2)

		depth, err := s.Depth(ctx)
		require.NoError(t, err)
		got := map[string]map[engine.State]int64{}
		for _, q := range depth {
			got[q.Queue] = q.Counts
		}
		require.Equal(t, map[string]map[engine.State]int64{
			"work":    {engine.StateRunning: 1, engine.StateFailed: 1},
			"default": {engine.StateReady: 3, engine.StateScheduled: 1, engine.StateBlocked: 1},
			"limited": {engine.StateRunning: 2, engine.StateScheduled: 1, engine.StateParked: 1},
		}, got)

		oldest, err := s.OldestWaiting(ctx)
		require.NoError(t, err)
		require.ElementsMatch(t, []engine.Oldest{
			{Queue: "default", Throttled: false, Since: t1},
			{Queue: "default", Throttled: true, Since: t1},
			{Queue: "limited", Throttled: true, Since: t1},
		}, oldest, "running, failed, finished and plainly scheduled jobs are not waiting")
	})
}
