package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/jobs"
)

type visitorJob struct{ Tenant string }

func (visitorJob) Kind() string { return "visitor_job" }

// fairKeyRows counts the rows of sluice_fair_keys.
func fairKeyRows(t *testing.T, s *engine.Store) int {
	t.Helper()
	rows, err := s.DB().Query(context.Background(), "SELECT count(*) FROM sluice_fair_keys")
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	for rows.Next() {
		require.NoError(t, rows.Scan(&n))
	}
	require.NoError(t, rows.Err())
	return n
}

// visitorRound enqueues one job for each of n new tenants, runs them all,
// then lets the level sit idle past two of the dispatcher's hourly
// clean-ups. It returns the jobs' starts.
func visitorRound(t *testing.T, h *harness, d *dispatcher.Dispatcher, round, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = h.enqueue(visitorJob{Tenant: fmt.Sprintf("r%d_tenant_%d", round, i)})
	}
	starts := make([]int64, n)
	for i, id := range ids {
		starts[i] = h.job(id).FairStart
	}
	for range 3 {
		h.drain(jobs.WorkerConfig{})
		_, err := d.Tick(ctx)
		require.NoError(t, err)
		h.clock.Advance(time.Second)
	}
	for range 2 {
		h.clock.Advance(time.Hour)
		_, err := d.Tick(ctx)
		require.NoError(t, err)
	}
	return starts
}

// registerVisitors registers visitorJob as a fair kind, keyed by tenant,
// and returns a dispatcher.
func registerVisitors(t *testing.T, h *harness) *dispatcher.Dispatcher {
	t.Helper()
	require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[visitorJob]) error { return nil },
		jobs.Fair(func(a visitorJob) any { return a.Tenant })))
	return newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
}

// docs/operations.md: idle fairness keys are deleted hourly — while a fair
// job of their level waits long too (here delayed by 30 days; as well a
// retry with a long backoff, a snoozed job, a job blocked on a key that
// stays held). The prune's bound was the lowest start of the level's
// waiting jobs, which that job pinned: every tenant that ran after it kept
// its row until it ran. Now the tenants of earlier rounds go: only the
// last round's (the latest finishes, which the level's virtual time is
// read from) and the waiting job's own key stay. And the prune moves no
// start: each round's tenants start at the level's virtual time, the
// finish of the round before, not back at the waiting job's start.
func TestIdleFairKeysArePrunedWhileAJobWaitsLong(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		d := registerVisitors(t, h)
		h.enqueue(visitorJob{Tenant: "next_month"}, jobs.Delay(30*24*time.Hour))
		const tenants = 100
		for round := range 3 {
			starts := visitorRound(t, h, d, round, tenants)
			for _, s := range starts {
				require.Equal(t, int64(round)*engine.FairScale, s, "round %d starts at the last round's finish", round)
			}
			require.LessOrEqual(t, fairKeyRows(t, h.store), tenants+1,
				"after round %d, the rows of the tenants of earlier rounds, idle for hours, are still there", round)
		}
	})
}

// A level that goes idle kept the rows of every key whose finish was the
// level's latest: the prune deleted the keys whose finish was strictly
// before the level's virtual time, which, idle, is that latest finish. A
// burst of new tenants (one job each, all started at one virtual time, so
// all with one finish) that then went quiet left all its rows for ever.
// Now one row stays: the level's virtual time, with none of its jobs
// ready, is read from its keys' latest finish, and a level without rows
// would start its next keys back at 0 (behind a job that comes back with
// its old start by the whole of the level's past). A tenant that comes
// after the prune starts where it would have without it.
func TestTheKeysOfAnIdleLevelArePrunedButItsLatest(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		d := registerVisitors(t, h)
		visitorRound(t, h, d, 0, 100)
		require.Equal(t, 1, fairKeyRows(t, h.store), "rows of tenants idle for two hours, on an idle level")
		id := h.enqueue(visitorJob{Tenant: "late"})
		require.Equal(t, int64(engine.FairScale), h.job(id).FairStart, "the level's virtual time is the burst's finish still")
	})
}
