package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// docs/recurring.md, "Exactly once per tick": the clean-up deletes tick
// records older than its bound, except each task's latest, however old:
// a dispatcher that catches up after a stall finds the latest tick
// recorded, and the task list shows when the task last ran. A task whose
// ticks are all recent keeps them all.
func TestOldTickRecordsAreDeletedButEachTasksLatest(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		day := 24 * time.Hour
		ticks := map[string][]time.Duration{
			"monthly": {-62 * day, -31 * day},           // all old: the latest stays
			"hourly":  {-9 * day, -8 * day, -time.Hour}, // the old ones go
			"recent":  {-2 * time.Hour, -time.Hour},     // none old
		}
		for task, ds := range ticks {
			for _, d := range ds {
				ran, err := s.RunTick(ctx, task, at(d), at(d), nil)
				require.NoError(t, err)
				require.True(t, ran)
			}
		}
		n, err := s.DeleteTicks(ctx, at(-7*day))
		require.NoError(t, err)
		require.Equal(t, 3, n, "monthly's first, hourly's two old ones")
		last, err := s.LastTicks(ctx)
		require.NoError(t, err)
		require.True(t, last["monthly"].RunAt.Equal(at(-31*day)), "monthly's last run: %v", last["monthly"].RunAt)
		require.True(t, last["hourly"].RunAt.Equal(at(-time.Hour)))
		for task, want := range map[string][]time.Duration{"monthly": {-31 * day}, "hourly": {-time.Hour}, "recent": {-2 * time.Hour, -time.Hour}} {
			for _, d := range want {
				again, err := s.RunTick(ctx, task, at(d), at(0), nil)
				require.NoError(t, err)
				require.False(t, again, "%s's tick at %v is still recorded", task, d)
			}
		}
		again, err := s.RunTick(ctx, "hourly", at(-8*day), at(0), nil)
		require.NoError(t, err)
		require.True(t, again, "hourly's old tick was deleted")
	})
}

// Dispatchers record a tick (each dispatcher the same one; all but the
// first find it recorded) while another runs the hourly clean-up of old
// records. Here a dispatcher's transaction holds the latest record of a
// task (it is recording that tick again) when the clean-up runs: the
// clean-up deletes the old records without waiting for it. On MySQL the
// clean-up's one statement read every task's latest through a subquery,
// which MySQL's DML locks, so it waited for the tick being recorded, and
// with three dispatchers at the hour deadlocked with their ticks
// (TestSeveralDispatchersEnqueueEachTickOnce met it once in CI).
func TestTheTickCleanUpWaitsForNoTickBeingRecorded(t *testing.T) {
	testdb.EachPool(t, func(t *testing.T, s *engine.Store, open func() *engine.Store) {
		if !s.Dialect().Capabilities().RowLocks {
			return // SQLite: one writer at a time, nothing to interleave
		}
		ctx := context.Background()
		day := 24 * time.Hour
		for _, d := range []time.Duration{-9 * day, -8 * day, -time.Hour} {
			ran, err := s.RunTick(ctx, "hourly", at(d), at(d), nil)
			require.NoError(t, err)
			require.True(t, ran)
		}
		other := open()
		tx, err := other.DB().Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		q, args := other.SQL().InsertTick("hourly", engine.Micros(at(-time.Hour)), engine.Micros(at(0)))
		_, err = tx.Exec(ctx, q, args...)
		require.NoError(t, err)

		wait, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := s.DeleteTicks(wait, at(-7*day))
		require.NoError(t, err, "the clean-up waited for the tick being recorded")
		require.Equal(t, 2, n)
	})
}
