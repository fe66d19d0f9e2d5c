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

// guarantees.md, "A worker that dies ... Any live worker or
// dispatcher that finds a heartbeat older than 5 minutes (DeadAfter)
// releases that process's running jobs back to ready, counting the lost
// run as an attempt ..., and removes the process". A dispatcher alone,
// with no worker running, rescues a killed worker's job.
func TestADispatcherAloneReleasesAKilledWorkersJobs(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		c := clock.NewFake(t0)
		res, err := s.Enqueue(ctx, nil, engine.At(t0), []engine.NewJob{{Kind: "k", Queue: "default", Args: []byte(`{}`), MaxAttempts: 3}})
		require.NoError(t, err)
		id := res[0].ID
		dead, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", Name: "killed", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		cl, err := s.Claim(ctx, engine.ClaimParams{ProcessID: dead, Queues: []string{"default"}, Max: 1, Clock: engine.At(t0)})
		require.NoError(t, err)
		require.Len(t, cl.Jobs, 1)

		d := newDispatcher(t, s, dispatcher.Config{Clock: c, Logger: quiet(), Interval: time.Hour})
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- d.Run(runCtx) }()
		for i := 1; i <= 5; i++ {
			<-c.WaitForTimerAt(t0.Add(time.Duration(i) * time.Minute)) // its heartbeat waits
			j, err := s.GetJob(ctx, id)
			require.NoError(t, err)
			require.Equal(t, engine.StateRunning, j.State, "not presumed dead before DeadAfter (minute %d)", i-1)
			c.Advance(time.Minute)
		}
		<-c.WaitForTimerAt(t0.Add(6 * time.Minute))
		c.Advance(time.Minute)                      // 6 minutes: the killed worker's heartbeat is 6 minutes old
		<-c.WaitForTimerAt(t0.Add(7 * time.Minute)) // that beat is over
		j, err := s.GetJob(ctx, id)
		require.NoError(t, err)
		require.Equal(t, engine.StateReady, j.State)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, engine.LostError, j.LastError)
		ps, err := s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Len(t, ps, 1, "the killed worker is removed; the dispatcher stays")
		require.Equal(t, d.ProcessID(), ps[0].ID)
		cancel()
		require.NoError(t, <-done)
	})
}
