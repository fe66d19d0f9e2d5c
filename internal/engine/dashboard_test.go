package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// Ready jobs sit in two indexes (plain and rate-limited); a queue holding
// both is counted once with their sum.
func TestDepthAddsBothReadyStreams(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		enqueue(t, s, t0, job("a", "default", 0), job("a", "default", 0), limited("sync", "sync/global"))
		depth, err := s.Depth(ctx)
		require.NoError(t, err)
		require.Len(t, depth, 1)
		require.Equal(t, int64(3), depth[0].Counts[engine.StateReady])
		stats, err := s.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(3), stats[0].Counts[engine.StateReady])
	})
}

func TestDashboardQueries(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		pid := register(t, s, t0)
		var all []int64
		for range 7 {
			all = append(all, enqueue(t, s, t0, job("a", "default", 0), job("b", "other", 0))...)
		}
		// Keyset pages: newest first, each below the last id of the one before.
		page, next, err := s.PageJobs(ctx, engine.JobPage{Kind: "a", Limit: 3})
		require.NoError(t, err)
		require.Equal(t, []int64{all[12], all[10], all[8]}, idsOf(page))
		require.Equal(t, all[8], next)
		page, next, err = s.PageJobs(ctx, engine.JobPage{Kind: "a", Limit: 3, Before: next})
		require.NoError(t, err)
		require.Equal(t, []int64{all[6], all[4], all[2]}, idsOf(page))
		page, next, err = s.PageJobs(ctx, engine.JobPage{Kind: "a", Limit: 3, Before: next})
		require.NoError(t, err)
		require.Equal(t, []int64{all[0]}, idsOf(page))
		require.Zero(t, next, "the last page says so")

		n, err := s.CountJobs(ctx, engine.JobPage{Queue: "other"}, 100)
		require.NoError(t, err)
		require.Equal(t, engine.Count{N: 7}, n)
		n, err = s.CountJobs(ctx, engine.JobPage{State: engine.StateReady}, 5)
		require.NoError(t, err)
		require.Equal(t, engine.Count{N: 5, Capped: true}, n)
		require.Equal(t, "5+", n.String())
		got, err := s.JobIDs(ctx, engine.JobPage{Queue: "other", Before: 1}, 2)
		require.NoError(t, err)
		require.Equal(t, []int64{all[13], all[11]}, got, "Before is ignored: the set a bulk action touches")

		// Finished jobs per bucket, and the admissions of a budget.
		claimed := claim(t, s, pid, at(time.Second), 3, "default")
		require.Len(t, claimed.Jobs, 3)
		require.NoError(t, s.Finish(ctx, pid, engine.At(at(2*time.Second)), engine.Outcomes{
			Completed: runs(t, s, claimed.Jobs[0].ID),
			Others:    ran(t, s, engine.Transition{ID: claimed.Jobs[1].ID, State: engine.StateFailed, Error: "x", Finished: true})}))
		fin, err := s.FinishedSince(ctx, t0, time.Minute)
		require.NoError(t, err)
		require.ElementsMatch(t, []engine.Finished{
			{Queue: "default", State: engine.StateCompleted, At: t0, Count: 1},
			{Queue: "default", State: engine.StateFailed, At: t0, Count: 1},
		}, fin)
		fin, err = s.FinishedSince(ctx, at(time.Hour), time.Minute)
		require.NoError(t, err)
		require.Empty(t, fin)
		_, err = s.FinishedSince(ctx, t0, 0)
		require.Error(t, err)

		lim := limits{"sync": spec(t, "sync", 10, time.Minute, 10)}
		enqueue(t, s, t0, limited("sync", "sync/global"), limited("sync", "sync/global"))
		res := claimLimited(t, s, pid, at(3*time.Second), 10, lim, 0, "default")
		require.NotEmpty(t, res.Jobs)
		adm, capped, err := s.AdmissionsSince(ctx, "", t0, 100)
		require.NoError(t, err)
		require.False(t, capped)
		require.Len(t, adm["sync/global"], 2)
		require.Equal(t, at(3*time.Second), adm["sync/global"][0])

		// Pauses, read without the jobs table.
		require.NoError(t, s.PauseQueue(ctx, "other", t0))
		qs, err := s.PausedQueues(ctx)
		require.NoError(t, err)
		require.Equal(t, []engine.QueueInfo{{Name: "other", Paused: true}}, qs)

		calls, err := s.JobCalls(ctx, all[0])
		require.NoError(t, err)
		require.Empty(t, calls)
	})
}

func idsOf(js []*engine.JobInfo) []int64 {
	out := make([]int64, len(js))
	for i, j := range js {
		out[i] = j.ID
	}
	return out
}
