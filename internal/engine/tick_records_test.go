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
