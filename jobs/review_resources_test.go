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

type reviewTenantJob struct{ Tenant string }

func (reviewTenantJob) Kind() string { return "review_tenant_job" }

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

// fairRound enqueues one job for each of n new tenants, runs them all,
// and then lets the level sit idle past the dispatcher's hourly clean-up.
func fairRound(t *testing.T, h *harness, d *dispatcher.Dispatcher, round, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		h.enqueue(reviewTenantJob{Tenant: fmt.Sprintf("r%d_tenant_%d", round, i)})
	}
	for i := 0; i < 3; i++ {
		h.drain(jobs.WorkerConfig{})
		_, err := d.Tick(ctx)
		require.NoError(t, err)
		h.clock.Advance(time.Second)
	}
	for i := 0; i < 2; i++ { // two hourly clean-ups
		h.clock.Advance(time.Hour)
		_, err := d.Tick(ctx)
		require.NoError(t, err)
	}
}

// One fair job that waits long (here delayed by 30 days; as well a retry
// with a long backoff, a snoozed job, or a job blocked on a key that stays
// held) pins the prune's bound (the lowest start of the level's waiting
// jobs) at its start: every tenant that runs after it keeps its
// sluice_fair_keys row, idle or not, until that job runs. With many
// tenants the table grows by one row per tenant for as long as the job
// waits. docs/operations.md says idle fairness keys are deleted hourly.
func TestReviewResourcesIdleFairKeysArePrunedWhileAJobWaitsLong(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[reviewTenantJob]) error { return nil },
			jobs.Fair(func(a reviewTenantJob) any { return a.Tenant })))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		h.enqueue(reviewTenantJob{Tenant: "next_month"}, jobs.Delay(30*24*time.Hour))
		const tenants = 100
		for round := 0; round < 3; round++ {
			fairRound(t, h, d, round, tenants)
			// At most the last round's tenants (their finishes are the
			// level's latest) and the waiting job's own key.
			require.LessOrEqual(t, fairKeyRows(t, h.store), tenants+1,
				"after round %d, the rows of the tenants of earlier rounds, idle for hours, are still there", round)
		}
	})
}

// A level that goes idle keeps the rows of every key whose finish is the
// level's latest: the prune deletes the keys whose finish is strictly
// before the level's virtual time, which, idle, is that latest finish. A
// burst of new tenants (one job each, all started at one virtual time, so
// all with one finish) that then goes quiet leaves all its rows for ever,
// though a key whose finish equals the virtual time starts its next job
// there whether its row is there or not.
func TestReviewResourcesTheLastFairKeysOfAnIdleLevelArePruned(t *testing.T) {
	each(t, func(t *testing.T, h *harness) {
		require.NoError(t, jobs.Register(h.reg, func(context.Context, *jobs.Job[reviewTenantJob]) error { return nil },
			jobs.Fair(func(a reviewTenantJob) any { return a.Tenant })))
		d := newDispatcher(t, h.store, dispatcher.Config{Clock: h.clock, Logger: quiet()})
		fairRound(t, h, d, 0, 100)
		require.Zero(t, fairKeyRows(t, h.store), "rows of tenants idle for two hours, on an idle level")
	})
}
