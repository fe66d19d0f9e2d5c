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

// docs/operations.md: "Completed and cancelled jobs are kept for
// inspection for a day, then the dispatcher deletes them
// (sluice.clear_finished_jobs, hourly)"; docs/fairness.md: "the
// dispatcher's hourly clear_idle_budgets task also deletes the key rows
// whose finish is behind their queue's virtual time".
func TestCancelledJobsAndIdleFairKeysAreClearedHourly(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		fair := func(key string) engine.NewJob {
			return engine.NewJob{Kind: "k", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1, FairKey: key, FairWeight: 1}
		}
		res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{fair("idle"), fair("busy"), fair("busy"), fair("busy")})
		require.NoError(t, err)
		later, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{{Kind: "k", Queue: "q", Args: []byte(`{}`), MaxAttempts: 1, RunAt: t0.Add(48 * time.Hour)}})
		require.NoError(t, err)
		cancelled, err := s.CancelJobs(ctx, engine.At(t0), []int64{res[0].ID, later[0].ID}, "")
		require.NoError(t, err)
		require.Len(t, cancelled, 2)
		// Two of busy's jobs are claimed: its last (start 2 steps) is the
		// queue's head, ahead of idle's finish (1 step).
		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet()})
		pid, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		got, err := s.Claim(ctx, engine.ClaimParams{ProcessID: pid, Queues: []string{"q"}, Max: 2, Clock: engine.At(t0), Fair: true})
		require.NoError(t, err)
		require.Len(t, got.Jobs, 2)
		c.Set(t0.Add(25 * time.Hour))
		_, err = d.Tick(ctx)
		require.NoError(t, err)
		for _, id := range []int64{res[0].ID, later[0].ID} {
			_, err = s.GetJob(ctx, id)
			require.ErrorIs(t, err, engine.ErrNotFound, "cancelled 25 h ago: deleted")
		}
		rows, err := s.DB().Query(ctx, "SELECT fair_key FROM sluice_fair_keys ORDER BY fair_key")
		require.NoError(t, err)
		var keys []string
		for rows.Next() {
			var k string
			require.NoError(t, rows.Scan(&k))
			keys = append(keys, k)
		}
		rows.Close()
		require.Equal(t, []string{"busy"}, keys, "the idle key's row is pruned hourly")
	})
}
