package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/clock"
	"github.com/sluicequeue/sluice/dispatcher"
	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// The hourly clean-up of idle rows has four steps (budgets, fairness keys,
// concurrency keys, coalesce keys). The first failing used to skip the
// other three: a budget table that kept failing its clean-up left the
// coalesce keys to grow for good. Each step now runs whatever the others
// did, and the round's error names the one that failed.
func TestAFailingIdleBudgetsStepLeavesTheOtherCleanUpsRunning(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		_, err := s.DB().Exec(ctx, "INSERT INTO sluice_budgets (name, tat_ns, next_slot_ns, interval_ns, burst, updated_at) VALUES ('k/idle', 1, 1, 1000000000, 1, 1)")
		require.NoError(t, err)
		// A key row whose job is gone: released, for the clean-up to delete.
		_, err = s.DB().Exec(ctx, "INSERT INTO sluice_coalesce_keys (name, job_id) VALUES ('k/released', 987654321)")
		require.NoError(t, err)

		// The clean-up's read of idle budgets fails, as a statement that
		// keeps failing on one table would.
		db := &flakyCleanUpDB{DB: s.DB(), stmt: "FROM sluice_budgets WHERE tat_ns <="}
		db.fail.Store(true)
		c := clock.NewFake(t0) // 12:00: the first hourly tick is 13:00
		d := newDispatcher(t, engine.New(s.Dialect(), db), dispatcher.Config{Clock: c, Logger: quiet(),
			Maintenance: dispatcher.Maintenance{ClearFinishedJobs: dispatcher.MaintenanceTask{Off: true}, FreeExpiredSlots: dispatcher.MaintenanceTask{Off: true}}})
		c.Advance(time.Hour)
		_, tickErr := d.Tick(ctx)
		require.Error(t, tickErr)
		require.True(t, db.failed.Load())

		bs, err := s.ListBudgets(ctx)
		require.NoError(t, err)
		require.Len(t, bs, 1, "the failed step deleted nothing")
		var left int
		rows, err := s.DB().Query(ctx, "SELECT count(*) FROM sluice_coalesce_keys WHERE name = 'k/released'")
		require.NoError(t, err)
		require.True(t, rows.Next())
		require.NoError(t, rows.Scan(&left))
		rows.Close()
		require.Zero(t, left, "the coalesce keys' step ran after the budgets' failed")
		require.Contains(t, tickErr.Error(), "clear idle budgets", "the error names the step that failed")
	})
}

// The hourly clean-up of finished jobs also deletes old tick records. A
// failing read of finished jobs used to skip that step too.
func TestAFailingFinishedJobsStepStillDeletesOldTicks(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		day := 24 * time.Hour
		for _, at := range []time.Time{t0.Add(-9 * day), t0.Add(-time.Hour)} {
			ran, err := s.RunTick(ctx, "report", at, at, nil)
			require.NoError(t, err)
			require.True(t, ran)
		}
		finishedJob(t, s)

		db := &flakyCleanUpDB{DB: s.DB()}
		db.fail.Store(true)
		c := clock.NewFake(t0)
		d := newDispatcher(t, engine.New(s.Dialect(), db), dispatcher.Config{Clock: c, Logger: quiet(), Maintenance: onlyClearFinished})
		c.Advance(time.Hour)
		_, err := d.Tick(ctx)
		require.Error(t, err, "the finished jobs' read failed")
		require.True(t, db.failed.Load())
		again, err := s.RunTick(ctx, "report", t0.Add(-9*day), t0, nil)
		require.NoError(t, err)
		require.True(t, again, "the 9-day-old tick record was deleted, though the finished jobs' step failed")
	})
}
