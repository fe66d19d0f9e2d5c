package heartbeat_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicequeue/sluice/internal/engine"
	"github.com/sluicequeue/sluice/internal/heartbeat"
	"github.com/sluicequeue/sluice/internal/testdb"
)

// A beat stamps its process's row and then reaps the processes presumed
// dead, reading the clock for each. A clock that jumps between the two
// (a fake clock set far ahead while a beat runs, a host stalled between
// the statements for longer than DeadAfter) made the stamp look older
// than DeadAfter to the reap, and the process reaped itself: its running
// jobs were released while it ran them, and their results no longer
// counted. A beat never reaps its own process.
func TestABeatNeverReapsItsOwnProcess(t *testing.T) {
	testdb.Each(t, func(t *testing.T, s *engine.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		id, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", Hostname: "host", PID: 1}, engine.At(t0))
		require.NoError(t, err)
		var reads atomic.Int32
		jumping := engine.HostTime(func() time.Time {
			if reads.Add(1) == 1 {
				return t0 // the stamp
			}
			return t0.Add(time.Hour) // the reap, and anything after
		})
		var pid atomic.Int64
		pid.Store(id)
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		reaped := heartbeat.Beat(ctx, s, jumping, quiet, 5*time.Minute, &pid, func(context.Context) error {
			t.Error("the beat registered its process again")
			return nil
		})
		require.False(t, reaped, "the beat found its process alive")
		require.GreaterOrEqual(t, reads.Load(), int32(2), "the stamp and the reap each read the clock")
		ps, err := s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Len(t, ps, 1, "the process was not reaped by its own beat")
		require.Equal(t, id, ps[0].ID)

		// Another process's beat, an hour on, still finds it dead.
		other, err := s.RegisterProcess(ctx, engine.Process{Kind: "worker", Hostname: "host", PID: 2}, engine.At(t0.Add(time.Hour)))
		require.NoError(t, err)
		pid.Store(other)
		heartbeat.Beat(ctx, s, engine.At(t0.Add(time.Hour)), quiet, 5*time.Minute, &pid, func(context.Context) error { return nil })
		ps, err = s.ListProcesses(ctx)
		require.NoError(t, err)
		require.Len(t, ps, 1, "the stale process was reaped by the other's beat")
		require.Equal(t, other, ps[0].ID)
	})
}
