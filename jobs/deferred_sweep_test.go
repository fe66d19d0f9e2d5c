package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/jobs"
	"github.com/sluicequeue/sluice/ratelimit"
)

type flood struct{ N int }

func (flood) Kind() string { return "flood" }

// observability.md, "Deferrals on the job": a job's deferrals are written
// by a claim or by the sweep that defers a flood in bulk; OnDefer reports
// both, so that its events count every deferral the jobs record. The
// sweep's were once reported to no hook: of a flood of 1,000 jobs on a
// limit of one an hour, OnDefer saw the few the claims deferred, and none
// of the hundreds the sweep did. Each batch of a sweep is one event, of
// its one kind and budget, marked Swept. A flood of 200 is swept in three
// batches (50, 100 and the rest), each after the first following a rest
// of 19 times the last one's duration, which under -race on SQLite was
// most of the test's time with 500.
func TestOnDeferReportsEveryDeferralASweepMakes(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[flood]) error { return nil },
			jobs.RateLimit(ratelimit.Limit[flood]{To: 1, Per: time.Hour, Key: "global", Group: "api"})))
		const n = 200
		items := make([]jobs.Item, n)
		for i := range items {
			items[i] = jobs.Item{Args: flood{N: i}}
		}
		_, err := h.client.EnqueueMany(ctx, items)
		require.NoError(t, err)

		var mu sync.Mutex
		var events []jobs.DeferEvent
		w := h.worker(jobs.WorkerConfig{PollInterval: time.Hour, Hooks: jobs.Hooks{OnDefer: func(e jobs.DeferEvent) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, e)
		}}})
		stop := h.run(w)
		require.Eventually(t, func() bool { return countJobs(t, h, `state = 'ready'`) == 0 }, 2*time.Minute, 10*time.Millisecond,
			"the flood left the ready queue")
		stop() // waits for the sweeps, and so for their events

		mu.Lock()
		defer mu.Unlock()
		reported, swept, sweptJobs := 0, 0, map[int64]bool{}
		for _, e := range events {
			require.Equal(t, "flood", e.Kind)
			require.Equal(t, e.Count, len(e.JobIDs))
			require.Equal(t, map[string]int{"api": e.Count}, e.PerLimit, "the limit label is the group")
			require.False(t, e.Shadow)
			reported += e.Count
			if e.Swept {
				swept += e.Count
				require.Equal(t, []string{"api/global"}, e.Keys)
				require.Equal(t, map[string]int{"api/global": e.Count}, e.PerKey)
				require.LessOrEqual(t, e.Parked, e.Count)
				for _, id := range e.JobIDs {
					require.False(t, sweptJobs[id], "job %d is reported once per deferral", id)
					sweptJobs[id] = true
				}
			}
		}
		stored := sumDeferrals(t, h)
		t.Logf("deferrals stored: %d; reported: %d, of which by the sweep: %d", stored, reported, swept)
		require.Positive(t, swept, "the sweep deferred most of the flood")
		require.EqualValues(t, stored, reported, "every deferral the jobs record is reported to OnDefer")
	})
}

// countJobs counts the jobs that match where.
func countJobs(t *testing.T, h *harness, where string) int64 {
	t.Helper()
	return queryOne(t, h, `SELECT COUNT(*) FROM sluice_jobs WHERE `+where)
}

// sumDeferrals sums every job's deferrals.
func sumDeferrals(t *testing.T, h *harness) int64 {
	t.Helper()
	return queryOne(t, h, `SELECT COALESCE(SUM(deferrals), 0) FROM sluice_jobs`)
}

func queryOne(t *testing.T, h *harness, q string) int64 {
	t.Helper()
	rows, err := h.store.DB().Query(context.Background(), q)
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rows.Next())
	var n int64
	require.NoError(t, rows.Scan(&n))
	require.NoError(t, rows.Err())
	return n
}
